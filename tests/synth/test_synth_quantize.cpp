// The lane-parallel K-quant quantizers synth uses must produce exactly the bytes of the reference
// quantizers (cpu::quantize_row_ref, ggml's algorithms) on every kind of input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/synth/quantize_fast.hpp"

namespace ferry::synth {
namespace {

// Rows of 256-value blocks with awkward contents: Gaussian at several scales, all-positive and
// all-negative data (the min > 0 clamp), constant and zero sub-blocks (early returns), values below
// the 1e-15 group threshold, single outliers, and heavy tails.
std::vector<float> awkward_rows(int n_blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_blocks) * 256);
  for (int b = 0; b < n_blocks; ++b) {
    float* y = x.data() + static_cast<size_t>(b) * 256;
    const int kind = b % 10;
    const float s = std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 9)) - 4.0f);
    for (int i = 0; i < 256; ++i) {
      switch (kind) {
        case 0: case 1: case 2: y[i] = s * normal(rng); break;
        case 3: y[i] = s * uni(rng); break;                                   // all positive
        case 4: y[i] = -s * uni(rng) - s; break;                             // all negative
        case 5: y[i] = (i / 32) % 2 ? 0.5f * s : s * normal(rng); break;     // constant sub-blocks
        case 6: y[i] = (i / 16) % 3 ? 0.0f : s * normal(rng); break;         // zero sub-blocks
        case 7: y[i] = (i % 64 == 7) ? 50.0f * s : s * 1e-3f * normal(rng); break;  // outliers
        case 8: y[i] = 1e-17f * normal(rng); break;                          // below the eps
        case 9: { const float n = normal(rng); y[i] = s * n * n * n; break; }  // heavy tails
      }
    }
  }
  return x;
}

void expect_same_bytes(GgmlType t, const std::vector<float>& x, int64_t row_len) {
  const int64_t n_rows = static_cast<int64_t>(x.size()) / row_len;
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(row_len));
  std::vector<uint8_t> ref(rb * n_rows), fast(rb * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) cpu::quantize_row_ref(t, x.data() + r * row_len, ref.data() + r * rb, row_len);
  quantize_rows(t, x.data(), fast.data(), n_rows, row_len);
  size_t first_diff = ref.size();
  for (size_t i = 0; i < ref.size(); ++i)
    if (ref[i] != fast[i]) {
      first_diff = i;
      break;
    }
  EXPECT_EQ(first_diff, ref.size()) << type_name(t) << ": first differing byte " << first_diff << " (block "
                                    << first_diff / (rb * 256 / row_len) << ")";
}

TEST(SynthQuantize, LaneParallelKQuantsMatchReferenceBytes) {
  if (!quantize_rows_is_fast(GgmlType::Q4_K)) GTEST_SKIP() << "no AVX2: quantize_rows is the reference";
  const std::vector<float> x = awkward_rows(600, 1234);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    expect_same_bytes(t, x, 256);
    expect_same_bytes(t, x, 2048);
  }
}

TEST(SynthQuantize, OtherTypesFallBackToReference) {
  const std::vector<float> x = awkward_rows(20, 99);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    EXPECT_FALSE(quantize_rows_is_fast(t));
    expect_same_bytes(t, x, 512);
  }
}

TEST(SynthQuantize, ScalarIsaUsesReference) {
  const cpu::Isa before = cpu::active_isa();
  cpu::set_isa(cpu::Isa::scalar);
  EXPECT_FALSE(quantize_rows_is_fast(GgmlType::Q4_K));
  expect_same_bytes(GgmlType::Q4_K, awkward_rows(10, 5), 256);
  cpu::set_isa(before);
}

}  // namespace
}  // namespace ferry::synth
