// The sixteen-row interleaved layout (kernels/cpu/rows16.hpp): repack/unpack are inverses, and
// matmul_q on the layout gives bit for bit the file layout's results, for every ISA (those without
// the layout's kernel unpack first), batch sizes 1..4 and beyond, serial and parallel, dense and
// expert products; bad shapes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"
#include "kernels/cpu/rows16.hpp"
#include "runtime/core/error.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

constexpr GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4};

TEST(Rows16, RepackThenUnpackIsTheIdentityAndMovesEveryByte) {
  std::mt19937 rng(161);
  for (GgmlType t : kTypes)
    for (int64_t cols : {32, 96, 2048}) {
      const int64_t rows = 48;
      const std::vector<uint8_t> W = random_blocks(rng, t, rows * cols);
      std::vector<uint8_t> packed(W.size()), back(W.size(), 0xAB);
      cpu::repack_rows16(t, W.data(), rows, cols, packed.data());
      EXPECT_NE(packed, W) << type_name(t) << " cols " << cols;  // the layout differs
      cpu::unpack_rows16(t, packed.data(), rows, cols, back.data());
      EXPECT_EQ(back, W) << type_name(t) << " cols " << cols;
      // Group g keeps the bytes of its own rows: the first chunk holds row 0's scale field first.
      const size_t sb = t == GgmlType::MXFP4 ? 1 : 2;
      EXPECT_EQ(std::memcmp(packed.data(), W.data(), sb), 0);
    }
}

TEST(Rows16, MatmulOnTheLayoutIsBitIdenticalToTheFileLayout) {
  IsaGuard guard;
  std::mt19937 rng(162);
  for (GgmlType t : kTypes)
    for (int64_t cols : {64, 768}) {
      const int64_t rows = 80, max_batch = 13;
      const std::vector<uint8_t> W = random_blocks(rng, t, rows * cols);
      std::vector<uint8_t> packed(W.size());
      cpu::repack_rows16(t, W.data(), rows, cols, packed.data());
      const std::vector<float> X = random_normal(rng, max_batch * cols);
      const GgmlType vt = cpu::vec_dot_type(t);
      const auto xrb = static_cast<int64_t>(row_bytes(vt, static_cast<uint64_t>(cols)));
      std::vector<uint8_t> xq(static_cast<size_t>(xrb * max_batch));
      for (int64_t b = 0; b < max_batch; ++b)
        cpu::quantize_activation(t, X.data() + b * cols, xq.data() + b * xrb, cols);
      for (cpu::Isa isa : available_isas()) {
        cpu::set_isa(isa);
        for (int64_t n_batch : {1, 2, 3, 4, 5, 8, 13})
          for (bool parallel : {false, true})
            for (bool dense : {false, true}) {
              const std::string what = std::string(type_name(t)) + " " + cpu::isa_name(isa) +
                                       " cols " + std::to_string(cols) + " n_batch " +
                                       std::to_string(n_batch) + (parallel ? " parallel" : " serial") +
                                       (dense ? " dense" : " expert");
              std::vector<float> want(static_cast<size_t>(n_batch * rows), std::nanf("")), got = want;
              cpu::matmul_q(t, W.data(), rows, cols, xq.data(), xrb, n_batch, want.data(), rows,
                            parallel, dense);
              cpu::matmul_q(t, packed.data(), rows, cols, xq.data(), xrb, n_batch, got.data(), rows,
                            parallel, dense, WeightLayout::rows16);
              ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << what;
              for (float v : got) ASSERT_TRUE(std::isfinite(v)) << what;
            }
        // matmul (float activations) takes the layout too.
        std::vector<float> want(static_cast<size_t>(3 * rows)), got(want.size());
        cpu::matmul(t, W.data(), rows, cols, X.data(), cols, 3, want.data(), rows);
        cpu::matmul(t, packed.data(), rows, cols, X.data(), cols, 3, got.data(), rows, true,
                    WeightLayout::rows16);
        ASSERT_EQ(want, got) << type_name(t) << " " << cpu::isa_name(isa) << " matmul";
      }
    }
}

TEST(Rows16, KnowsWhereItApplies) {
  IsaGuard guard;
  EXPECT_TRUE(cpu::rows16_type(GgmlType::Q4_0));
  EXPECT_TRUE(cpu::rows16_type(GgmlType::MXFP4));
  EXPECT_FALSE(cpu::rows16_type(GgmlType::Q4_K));
  EXPECT_FALSE(cpu::rows16_type(GgmlType::Q8_0));
  cpu::set_isa(cpu::Isa::scalar);
  EXPECT_FALSE(cpu::rows16_fast(GgmlType::Q4_0, 64));  // no kernel: the engine keeps the file layout
  cpu::set_isa(cpu::detected_isa());
  if (cpu::detected_isa() >= cpu::Isa::avx512) {
    EXPECT_TRUE(cpu::rows16_fast(GgmlType::Q4_0, 64));
    EXPECT_FALSE(cpu::rows16_fast(GgmlType::Q4_0, 72));  // not a multiple of 16
    EXPECT_FALSE(cpu::rows16_fast(GgmlType::Q4_K, 64));
  }
}

TEST(Rows16, RefusesShapesWithoutTheLayout) {
  std::vector<uint8_t> W(18 * 64 * 24), out(W.size());
  std::vector<uint8_t> xq(34 * 64);
  std::vector<float> y(64);
  auto expect_invalid = [](auto&& fn, const char* what) {
    try {
      fn();
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_arg) << e.what();
    }
  };
  expect_invalid([&] { cpu::repack_rows16(GgmlType::Q4_0, W.data(), 24, 32, out.data()); }, "24 rows");
  expect_invalid([&] { cpu::repack_rows16(GgmlType::Q4_K, W.data(), 16, 256, out.data()); }, "Q4_K");
  expect_invalid([&] { cpu::repack_rows16(GgmlType::Q4_0, W.data(), 16, 40, out.data()); }, "40 cols");
  expect_invalid(
      [&] {
        cpu::matmul_q(GgmlType::Q4_0, W.data(), 24, 32, xq.data(), 34, 1, y.data(), 24, false, false,
                      WeightLayout::rows16);
      },
      "matmul on 24 rows");
}

}  // namespace
