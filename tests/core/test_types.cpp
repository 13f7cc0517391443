#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/core/types.hpp"

using namespace ferry;

TEST(Types, KnownAndUnknownIds) {
  EXPECT_EQ(type_info(12u)->block_bytes, 144u);
  EXPECT_EQ(type_info(14u)->block_bytes, 210u);
  EXPECT_FALSE(type_info(4u).has_value());  // Q4_2: removed from ggml, must be rejected
  EXPECT_FALSE(type_info(1000u).has_value());
  EXPECT_EQ(type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_FALSE(type_from_name("q4_k_m").has_value());
}

TEST(Types, RowBytesChecksBlocksAndOverflow) {
  EXPECT_EQ(row_bytes(GgmlType::Q8_0, 64), 68u);
  EXPECT_THROW(row_bytes(GgmlType::Q4_K, 100), Error);
  EXPECT_THROW(row_bytes(GgmlType::F32, ~0ull / 2), Error);
}

TEST(Fp16, RoundTripAndRounding) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int i = 0; i < 10000; ++i) {
    float f = nd(rng);
    float h = fp16_to_fp32(fp32_to_fp16(f));
    EXPECT_LE(std::fabs(h - f), std::fabs(f) * (1.0f / 1024) + 1e-7f);
    EXPECT_EQ(fp32_to_fp16(h), fp32_to_fp16(f));  // idempotent
    float b = bf16_to_fp32(fp32_to_bf16(f));
    EXPECT_LE(std::fabs(b - f), std::fabs(f) * (1.0f / 128));
  }
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(65504.f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7C00);  // overflow → inf
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}
