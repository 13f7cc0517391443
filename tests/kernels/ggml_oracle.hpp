#pragma once
// The ggml build of the project venv (llama-cpp-python's libggml-base / libggml-cpu), loaded with
// dlopen for the oracle tests (test_ggml_oracle*.cpp). FERRY_GGML_LIB_DIR overrides the search in
// <source>/.venv. Tests call REQUIRE_GGML() first: it skips them when the library is not there.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry::test {

using QuantizeFn = void (*)(const float*, void*, int64_t);
using DequantizeFn = void (*)(const void*, float*, int64_t);
using GgmlDotFn = void (*)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y,
                           size_t by, int nrc);

inline std::string find_ggml_dir() {
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

// How many of the block_bytes-sized blocks of a and b (same size) differ.
inline size_t differing_blocks(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t block_bytes) {
  size_t n = 0;
  for (size_t off = 0; off + block_bytes <= a.size(); off += block_bytes)
    n += std::memcmp(a.data() + off, b.data() + off, block_bytes) != 0;
  return n;
}

#define REQUIRE_GGML()                                     \
  if (!Ggml::get().ok()) GTEST_SKIP() << Ggml::get().why(); \
  static_assert(true)

}  // namespace ferry::test
