// Oracle: the rows a quantized KV cache holds (cpu::quantize_row_cpu, what CpuOps::kv_store writes)
// against what ggml-cpu's from_float writes for the same type (llama.cpp's ggml_set_rows into the
// cache): the reference quantizers for Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL, x86's SIMD
// quantize_row_q8_0 for Q8_0, round-to-nearest-even conversions for F16 and BF16. Skipped without
// the project venv's ggml (ggml_oracle.hpp).
#include <gtest/gtest.h>

#include <cstring>

#include "ggml_oracle.hpp"
#include "kernel_test_util.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

struct KvNamed {
  GgmlType t;
  const char* quantize;  // ggml's function for the type's from_float (or the ref it calls)
};
constexpr KvNamed kKvTypes[] = {
    {GgmlType::Q8_0, "quantize_row_q8_0"},          {GgmlType::Q4_0, "quantize_row_q4_0_ref"},
    {GgmlType::Q4_1, "quantize_row_q4_1_ref"},      {GgmlType::Q5_0, "quantize_row_q5_0_ref"},
    {GgmlType::Q5_1, "quantize_row_q5_1_ref"},      {GgmlType::IQ4_NL, "quantize_row_iq4_nl_ref"},
    {GgmlType::F16, "ggml_cpu_fp32_to_fp16"},       {GgmlType::BF16, "ggml_cpu_fp32_to_bf16"},
};

// K/V-like rows: Gaussian blocks at scales from 1e-3 to 1e2, a few with an outlier, a few of
// constant sign, and one block of values that sit on rounding ties of the int8 grid.
std::vector<float> kv_rows(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-3.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float scale = std::pow(10.0f, ud(rng));
    for (int j = 0; j < 32; ++j) x[b * 32 + j] = scale * nd(rng);
    if (b % 7 == 3) x[b * 32 + b % 32] *= 20.0f;
    if (b % 11 == 5)
      for (int j = 0; j < 32; ++j) x[b * 32 + j] = std::fabs(x[b * 32 + j]);
  }
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) + 0.5f;  // ties of x·127/amax and of nearest grid points
  return x;
}

}  // namespace

TEST(KvQuantGgml, CacheRowsAreBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(1601);
  const int64_t n = 128 * 512;
  const auto x = kv_rows(rng, n);
  for (const KvNamed& nt : kKvTypes) {
    std::vector<uint8_t> q_ggml(row_bytes(nt.t, n)), q_ours(row_bytes(nt.t, n));
    Ggml::get().sym<QuantizeFn>(nt.quantize)(x.data(), q_ggml.data(), n);
    cpu::quantize_row_cpu(nt.t, x.data(), q_ours.data(), n);
    const size_t bb = type_info(nt.t).block_bytes;
    const size_t differing = differing_blocks(q_ours, q_ggml, bb);
    EXPECT_EQ(differing, 0u) << type_name(nt.t) << ": " << differing << " of " << q_ours.size() / bb
                             << " blocks differ from ggml's " << nt.quantize;
  }
}

// IQ4_NL's reference quantizer is new with the KV cache: also the symbol's own name, on weights.
TEST(KvQuantGgml, Iq4NlReferenceQuantizerIsBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(1602);
  const int64_t n = 256 * 64;
  const auto x = random_weights(rng, n);
  std::vector<uint8_t> q_ggml(row_bytes(GgmlType::IQ4_NL, n)), q_ours(row_bytes(GgmlType::IQ4_NL, n));
  Ggml::get().sym<QuantizeFn>("quantize_row_iq4_nl_ref")(x.data(), q_ggml.data(), n);
  cpu::quantize_row_ref(GgmlType::IQ4_NL, x.data(), q_ours.data(), n);
  EXPECT_EQ(std::memcmp(q_ours.data(), q_ggml.data(), q_ours.size()), 0);
}
