// Oracle: our quantizers, dequantizers, activation quantizers and dot products against the ggml
// build that llama-cpp-python installs into the project venv (loaded with dlopen; its exported
// C symbols quantize_row_*_ref, dequantize_row_*, ggml_vec_dot_*). Skipped when that library is
// not there (a fresh checkout before scripts/ set up the venv); FERRY_GGML_LIB_DIR overrides the
// search. The types added later (Q4_0 … MXFP4, the repacked, tinyBLAS and tiled orders) are in
// test_ggml_oracle_types.cpp.
#include <gtest/gtest.h>

#include "ggml_oracle.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_kernels.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

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
    {GgmlType::Q4_0, "quantize_row_q4_0_ref", "dequantize_row_q4_0"},
    {GgmlType::Q4_1, "quantize_row_q4_1_ref", "dequantize_row_q4_1"},
    {GgmlType::Q5_0, "quantize_row_q5_0_ref", "dequantize_row_q5_0"},
    {GgmlType::Q5_1, "quantize_row_q5_1_ref", "dequantize_row_q5_1"},
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
    const size_t differing = differing_blocks(q_ours, q_ggml, bb);
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

// Dot products against the kernels llama.cpp's x86 CPU backend runs, bit for bit on every ISA
// path: ggml's SIMD vec_dot for Q8_0 / Q5_K / Q6_K, and for Q4_K its repacked 8-row gemv
// (ggml_gemv_q4_K_8x8_q8_K), which llama.cpp uses for every Q4_K matrix with a multiple of 8 rows.
// F16 (not a Ferry matmul path for quantized models) within the accumulation bound.
namespace {

// Eight Q4_K rows (one block column) interleaved as ggml's block_q4_Kx8: d[8], dmin[8], then per
// sub-block j the 8 rows' 6-bit scales/mins packed in 12 bytes, then the quants 8 bytes per row
// in turn.
std::vector<uint8_t> interleave_q4k_x8(const uint8_t* rows, size_t row_bytes_, int64_t nb) {
  constexpr size_t kOut = 16 * 2 + 96 + 1024;
  std::vector<uint8_t> out(static_cast<size_t>(nb) * kOut);
  for (int64_t b = 0; b < nb; ++b) {
    const cpu::BlockQ4K* in[8];
    for (int r = 0; r < 8; ++r)
      in[r] = reinterpret_cast<const cpu::BlockQ4K*>(rows + r * row_bytes_) + b;
    uint8_t* o = out.data() + b * kOut;
    for (int r = 0; r < 8; ++r) {
      std::memcpy(o + 2 * r, &in[r]->d, 2);
      std::memcpy(o + 16 + 2 * r, &in[r]->dmin, 2);
    }
    uint8_t* sc = o + 32;
    for (int j = 0; j < 8; ++j) {
      uint8_t s[8], m[8];
      for (int r = 0; r < 8; ++r) cpu::scale_min_k4(j, in[r]->scales, s[r], m[r]);
      uint8_t* g = sc + 12 * j;
      for (int r = 0; r < 4; ++r) {
        g[r] = static_cast<uint8_t>(s[r] | ((s[r + 4] & 48) << 2));
        g[r + 4] = static_cast<uint8_t>(m[r] | ((m[r + 4] & 48) << 2));
        g[r + 8] = static_cast<uint8_t>((s[r + 4] & 15) | ((m[r + 4] & 15) << 4));
      }
    }
    uint8_t* qs = o + 128;
    for (int i = 0; i < 1024 / 8; ++i) std::memcpy(qs + 8 * i, in[i % 8]->qs + 8 * (i / 8), 8);
  }
  return out;
}

// Eight random Q4_K rows of n values back to back (w, rb bytes each) and ggml's interleaved copy.
struct Q4KPanel {
  size_t rb;
  std::vector<uint8_t> w, packed;
  Q4KPanel(std::mt19937& rng, int64_t n) : rb(row_bytes(GgmlType::Q4_K, n)) {
    for (int r = 0; r < 8; ++r) {
      const auto row = quantize(GgmlType::Q4_K, random_weights(rng, n));
      w.insert(w.end(), row.begin(), row.end());
    }
    packed = interleave_q4k_x8(w.data(), rb, n / 256);
  }
};

}  // namespace

TEST(GgmlOracle, DotProductsAreBitExact) {
  REQUIRE_GGML();
  IsaGuard guard;
  std::mt19937 rng(44);
  struct Dot { GgmlType t; const char* name; };
  const Dot dots[] = {{GgmlType::Q8_0, "ggml_vec_dot_q8_0_q8_0"}, {GgmlType::Q5_K, "ggml_vec_dot_q5_K_q8_K"},
                      {GgmlType::Q6_K, "ggml_vec_dot_q6_K_q8_K"}, {GgmlType::F16, "ggml_vec_dot_f16"}};
  for (const Dot& d : dots) {
    for (int64_t n : {256, 768, 4352}) {
      for (int rep = 0; rep < 4; ++rep) {
        const auto w = quantize(d.t, random_weights(rng, n));
        const auto x = random_normal(rng, n);
        std::vector<uint8_t> xq(row_bytes(cpu::vec_dot_type(d.t), n));
        cpu::quantize_activation(d.t, x.data(), xq.data(), n);
        float theirs = 0;
        Ggml::get().sym<GgmlDotFn>(d.name)(static_cast<int>(n), &theirs, 0, w.data(), 0, xq.data(), 0, 1);
        if (d.t == GgmlType::F16) {
          const auto wd = dequantize(d.t, w.data(), n);
          double mag = 0;
          for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(wd[i]) * x[i]);
          EXPECT_NEAR(cpu::vec_dot(d.t, w.data(), xq.data(), n), theirs,
                      (static_cast<double>(n) / 4 + 64) * std::ldexp(1.0, -24) * mag) << d.name;
          continue;
        }
        ASSERT_EQ(cpu::vec_dot_ref(d.t, w.data(), xq.data(), n), theirs) << d.name << " n=" << n << " (scalar)";
        for (cpu::Isa isa : available_isas()) {
          cpu::set_isa(isa);
          ASSERT_EQ(cpu::vec_dot(d.t, w.data(), xq.data(), n), theirs) << d.name << " n=" << n << " on "
                                                                       << cpu::isa_name(isa);
        }
      }
    }
  }
}

TEST(GgmlOracle, Q4KMatchesRepackedGemvBitExact) {
  REQUIRE_GGML();
  IsaGuard guard;
  using GemvFn = void (*)(int n, float* s, size_t bs, const void* vx, const void* vy, int nr, int nc);
  const auto gemv = Ggml::get().sym<GemvFn>("ggml_gemv_q4_K_8x8_q8_K");
  ASSERT_NE(gemv, nullptr);
  std::mt19937 rng(45);
  for (int64_t n : {256, 1024, 2816}) {
    const Q4KPanel p(rng, n);
    for (int rep = 0; rep < 4; ++rep) {
      const auto x = random_normal(rng, n, 2.f);
      std::vector<uint8_t> xq(row_bytes(GgmlType::Q8_K, n));
      cpu::quantize_activation(GgmlType::Q4_K, x.data(), xq.data(), n);
      float theirs[8];
      gemv(static_cast<int>(n), theirs, 8, p.packed.data(), xq.data(), 1, 8);
      for (int r = 0; r < 8; ++r) {
        ASSERT_EQ(cpu::vec_dot_ref(GgmlType::Q4_K, p.w.data() + r * p.rb, xq.data(), n), theirs[r])
            << "n=" << n << " row " << r << " (scalar)";
        for (cpu::Isa isa : available_isas()) {
          cpu::set_isa(isa);
          ASSERT_EQ(cpu::vec_dot(GgmlType::Q4_K, p.w.data() + r * p.rb, xq.data(), n), theirs[r])
              << "n=" << n << " row " << r << " on " << cpu::isa_name(isa);
        }
      }
    }
  }
}

// The batched form llama.cpp uses for prompts: four activation rows quantized together
// (ggml_quantize_mat_q8_K_4x8) and ggml_gemm_q4_K_8x8_q8_K; each of the 4 × 8 results must be
// Ferry's grouped-order dot (what matmul uses for full groups of 4 rows) of that weight row with
// that activation row, on every ISA path.
TEST(GgmlOracle, Q4KMatchesRepackedGemmBitExact) {
  REQUIRE_GGML();
  using GemmFn = void (*)(int n, float* s, size_t bs, const void* vx, const void* vy, int nr, int nc);
  using QuantMatFn = void (*)(const float* x, void* vy, int64_t k);
  const auto gemm = Ggml::get().sym<GemmFn>("ggml_gemm_q4_K_8x8_q8_K");
  const auto quant4 = Ggml::get().sym<QuantMatFn>("ggml_quantize_mat_q8_K_4x8");
  ASSERT_NE(gemm, nullptr);
  ASSERT_NE(quant4, nullptr);
  std::mt19937 rng(46);
  for (int64_t n : {256, 1024, 2816}) {
    const int64_t nb = n / 256;
    const Q4KPanel p(rng, n);
    for (int rep = 0; rep < 4; ++rep) {
      const auto x = random_normal(rng, 4 * n, 2.f);
      std::vector<uint8_t> x4(static_cast<size_t>(nb) * (16 + 4 * 256 + 2 * 64));  // block_q8_Kx4
      for (int64_t b = 0; b < nb; ++b) {  // ggml quantizes 4 rows one 256-block column at a time
        std::vector<float> cols(4 * 256);
        for (int r = 0; r < 4; ++r) std::copy_n(x.data() + r * n + b * 256, 256, cols.data() + r * 256);
        quant4(cols.data(), x4.data() + b * x4.size() / nb, 256);
      }
      float theirs[4 * 8];
      gemm(static_cast<int>(n), theirs, 8, p.packed.data(), x4.data(), 4, 8);
      const size_t xb = row_bytes(GgmlType::Q8_K, n);
      std::vector<uint8_t> xq(4 * xb);
      for (int a = 0; a < 4; ++a) cpu::quantize_activation(GgmlType::Q4_K, x.data() + a * n, xq.data() + a * xb, n);
      for (cpu::Isa isa : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512vnni}) {
        if (isa > cpu::detected_isa()) continue;
        const auto f = cpu::detail::dot_fn(cpu::detail::dot_kernels(isa), GgmlType::Q4_K, cpu::detail::DotOrder::group4);
        for (int r = 0; r < 8; ++r) {
          float ours[4];
          f(n, p.w.data() + r * p.rb, xq.data(), xb, 4, ours);
          for (int a = 0; a < 4; ++a)
            ASSERT_EQ(ours[a], theirs[a * 8 + r]) << "n=" << n << " activation row " << a << " weight row " << r
                                                  << " on " << cpu::isa_name(isa);
        }
      }
    }
  }
}
