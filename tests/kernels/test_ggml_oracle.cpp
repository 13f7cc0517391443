// Oracle: our quantizers, dequantizers, activation quantizers and dot products against the ggml
// build that llama-cpp-python installs into the project venv (loaded with dlopen; its exported
// C symbols quantize_row_*_ref, dequantize_row_*, ggml_vec_dot_*). Skipped when that library is
// not there (a fresh checkout before scripts/ set up the venv); FERRY_GGML_LIB_DIR overrides the
// search.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernel_test_util.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

using QuantizeFn = void (*)(const float*, void*, int64_t);
using DequantizeFn = void (*)(const void*, float*, int64_t);
using GgmlDotFn = void (*)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y,
                           size_t by, int nrc);

std::string find_ggml_dir() {
  if (const char* env = std::getenv("FERRY_GGML_LIB_DIR")) return env;
  namespace fs = std::filesystem;
  const fs::path lib = fs::path(FERRY_SOURCE_DIR) / ".venv" / "lib";
  std::error_code ec;
  if (!fs::is_directory(lib, ec)) return {};
  for (const auto& py : fs::directory_iterator(lib, ec)) {
    const fs::path dir = py.path() / "site-packages" / "llama_cpp" / "lib";
    if (fs::exists(dir / "libggml-cpu.so", ec)) return dir.string();
  }
  return {};
}

class Ggml {
 public:
  static Ggml& get() {
    static Ggml g;
    return g;
  }
  bool ok() const { return base_ && cpu_; }
  const std::string& why() const { return why_; }
  template <typename F>
  F sym(const char* name) {
    void* p = dlsym(base_, name);
    if (!p) p = dlsym(cpu_, name);
    if (!p) ADD_FAILURE() << "symbol " << name << " missing from ggml";
    return reinterpret_cast<F>(p);
  }

 private:
  Ggml() {
    const std::string dir = find_ggml_dir();
    if (dir.empty()) {
      why_ = "no llama_cpp/lib in " FERRY_SOURCE_DIR "/.venv (set FERRY_GGML_LIB_DIR)";
      return;
    }
    base_ = dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    cpu_ = dlopen((dir + "/libggml-cpu.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!ok()) {
      why_ = std::string("dlopen failed: ") + dlerror();
      return;
    }
    if (auto init = reinterpret_cast<void (*)()>(dlsym(cpu_, "ggml_cpu_init"))) init();
  }
  void* base_ = nullptr;
  void* cpu_ = nullptr;
  std::string why_;
};

#define REQUIRE_GGML()                                     \
  if (!Ggml::get().ok()) GTEST_SKIP() << Ggml::get().why(); \
  static_assert(true)

struct Named {
  GgmlType t;
  const char* quantize;
  const char* dequantize;
};
constexpr Named kQuantTypes[] = {
    {GgmlType::Q8_0, "quantize_row_q8_0_ref", "dequantize_row_q8_0"},
    {GgmlType::Q4_K, "quantize_row_q4_K_ref", "dequantize_row_q4_K"},
    {GgmlType::Q5_K, "quantize_row_q5_K_ref", "dequantize_row_q5_K"},
    {GgmlType::Q6_K, "quantize_row_q6_K_ref", "dequantize_row_q6_K"},
    {GgmlType::Q8_K, "quantize_row_q8_K_ref", "dequantize_row_q8_K"},
};

}  // namespace

// Same bytes as llama.cpp's reference quantizers (what llama-quantize uses without an imatrix).
TEST(GgmlOracle, ReferenceQuantizersAreBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(41);
  const int64_t n = 256 * 256;
  const auto x = random_weights(rng, n);
  for (const Named& nt : kQuantTypes) {
    auto q_ggml = std::vector<uint8_t>(row_bytes(nt.t, n));
    Ggml::get().sym<QuantizeFn>(nt.quantize)(x.data(), q_ggml.data(), n);
    const auto q_ours = quantize(nt.t, x);
    const size_t bb = type_info(nt.t).block_bytes;
    size_t differing = 0;
    for (size_t b = 0; b < q_ours.size() / bb; ++b)
      differing += std::memcmp(q_ours.data() + b * bb, q_ggml.data() + b * bb, bb) != 0;
    EXPECT_EQ(differing, 0u) << type_name(nt.t) << ": " << differing << " of " << q_ours.size() / bb
                             << " blocks differ from " << nt.quantize;
  }
}

TEST(GgmlOracle, DequantizationIsBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(42);
  const int64_t n = 256 * 64;
  for (const Named& nt : kQuantTypes) {
    const auto q = quantize(nt.t, random_weights(rng, n));
    std::vector<float> y_ggml(static_cast<size_t>(n));
    Ggml::get().sym<DequantizeFn>(nt.dequantize)(q.data(), y_ggml.data(), n);
    EXPECT_EQ(dequantize(nt.t, q.data(), n), y_ggml) << type_name(nt.t);
  }
}

// The activation quantizers llama.cpp's CPU backend runs (quantize_row_q8_0 is the x86 SIMD one).
TEST(GgmlOracle, ActivationQuantizersAreBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(43);
  const int64_t n = 256 * 32;
  const auto x = random_normal(rng, n, 3.f);
  for (auto [w, name] : {std::pair{GgmlType::Q8_0, "quantize_row_q8_0"}, std::pair{GgmlType::Q4_K, "quantize_row_q8_K"}}) {
    const GgmlType vt = cpu::vec_dot_type(w);
    std::vector<uint8_t> ours(row_bytes(vt, n)), theirs(ours.size());
    cpu::quantize_activation(w, x.data(), ours.data(), n);
    Ggml::get().sym<QuantizeFn>(name)(x.data(), theirs.data(), n);
    EXPECT_EQ(ours, theirs) << name;
  }
}

// Dot products against ggml's scalar (_generic) and SIMD kernels on the same inputs.
TEST(GgmlOracle, DotProductsAgree) {
  REQUIRE_GGML();
  std::mt19937 rng(44);
  struct Dot { GgmlType t; const char* name; };
  const Dot dots[] = {{GgmlType::Q8_0, "ggml_vec_dot_q8_0_q8_0"}, {GgmlType::Q4_K, "ggml_vec_dot_q4_K_q8_K"},
                      {GgmlType::Q5_K, "ggml_vec_dot_q5_K_q8_K"}, {GgmlType::Q6_K, "ggml_vec_dot_q6_K_q8_K"},
                      {GgmlType::F16, "ggml_vec_dot_f16"}};
  for (const Dot& d : dots) {
    for (int64_t n : {256, 768, 4352}) {
      const auto w = quantize(d.t, random_weights(rng, n));
      const auto x = random_normal(rng, n);
      std::vector<uint8_t> xq(row_bytes(cpu::vec_dot_type(d.t), n));
      cpu::quantize_activation(d.t, x.data(), xq.data(), n);
      const auto wd = dequantize(d.t, w.data(), n);
      const auto xd = dequantize(cpu::vec_dot_type(d.t), xq.data(), n);
      double mag = 0;
      for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(wd[i]) * xd[i]);
      const double tol = (static_cast<double>(n) / 8 + 64) * std::ldexp(1.0, -24) * mag;
      float s_simd = 0;
      Ggml::get().sym<GgmlDotFn>(d.name)(static_cast<int>(n), &s_simd, 0, w.data(), 0, xq.data(), 0, 1);
      EXPECT_NEAR(cpu::vec_dot(d.t, w.data(), xq.data(), n), s_simd, 2 * tol) << d.name << " n=" << n;
      if (d.t != GgmlType::F16) {
        float s_generic = 0;
        Ggml::get().sym<GgmlDotFn>((std::string(d.name) + "_generic").c_str())(
            static_cast<int>(n), &s_generic, 0, w.data(), 0, xq.data(), 0, 1);
        EXPECT_NEAR(cpu::vec_dot_ref(d.t, w.data(), xq.data(), n), s_generic, tol) << d.name << " n=" << n;
      }
    }
  }
}
