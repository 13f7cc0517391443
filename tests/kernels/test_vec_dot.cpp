// Dot products: the scalar reference against a double-precision dot of the dequantized operands,
// and every SIMD path (each one this CPU has) against the reference — bit for bit for the quantized
// types, whose float accumulation order is fixed (dot_ref.cpp) — for 1, 2, 3 and 17 blocks,
// one activation row at a time (vec_dot) and up to four at once (the batched kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"
#include "kernels/cpu/dot_kernels.hpp"
#include "runtime/core/error.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

struct DotCase {
  std::vector<uint8_t> w;                // weight row
  std::vector<uint8_t> xq;               // activation row in vec_dot_type(w)
  double exact = 0;                      // Σ deq(w)·deq(xq) in double
  double magnitude = 0;                  // Σ |deq(w)·deq(xq)|
};

DotCase make_case(std::mt19937& rng, GgmlType t, int64_t n) {
  DotCase c;
  c.w = weight_row(rng, t, n);
  const GgmlType vt = cpu::vec_dot_type(t);
  const auto x = random_normal(rng, n);
  c.xq.resize(row_bytes(vt, static_cast<uint64_t>(n)));
  cpu::quantize_activation(t, x.data(), c.xq.data(), n);
  const auto wd = dequantize(t, c.w.data(), n);
  const auto xd = dequantize(vt, c.xq.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(wd[static_cast<size_t>(i)]) * xd[static_cast<size_t>(i)];
    c.exact += p;
    c.magnitude += std::fabs(p);
  }
  double min_mag;
  c.exact += q8_1_min_term_shift(t, c.w.data(), c.xq.data(), n, &min_mag);
  c.magnitude += min_mag;
  return c;
}

// Float accumulation error bound for a dot of n terms: every path sums at most n/8 + 64 rounded
// terms in sequence (8+ lanes, plus per-block scale products and the final reduction), each
// adding ≤ 2^-24 relative error of the running magnitude.
double tolerance(int64_t n, double magnitude) {
  return (static_cast<double>(n) / 8 + 64) * std::ldexp(1.0, -24) * magnitude + 1e-30;
}

std::vector<int64_t> test_lengths(GgmlType t) {
  const int64_t bv = block_values(t);
  if (bv == 1) return {1, 2, 3, 17, 31, 33, 255, 4096 + 7};
  return {bv, 2 * bv, 3 * bv, 17 * bv};
}

}  // namespace

TEST(VecDot, ReferenceMatchesDequantizedDot) {
  std::mt19937 rng(21);
  for (GgmlType t : kWeightTypes) {
    for (int64_t n : test_lengths(t)) {
      const DotCase c = make_case(rng, t, n);
      const float got = cpu::vec_dot_ref(t, c.w.data(), c.xq.data(), n);
      EXPECT_NEAR(got, c.exact, tolerance(n, c.magnitude)) << type_name(t) << " n=" << n;
    }
  }
}

TEST(VecDot, EverySimdPathMatchesReference) {
  IsaGuard guard;
  std::mt19937 rng(22);
  for (cpu::Isa isa : available_isas()) {
    cpu::set_isa(isa);
    ASSERT_EQ(cpu::active_isa(), isa);
    for (GgmlType t : kWeightTypes) {
      for (int64_t n : test_lengths(t)) {
        for (int rep = 0; rep < 3; ++rep) {
          const DotCase c = make_case(rng, t, n);
          const float ref = cpu::vec_dot_ref(t, c.w.data(), c.xq.data(), n);
          const float got = cpu::vec_dot(t, c.w.data(), c.xq.data(), n);
          if (block_values(t) > 1) {  // quantized: one defined order (dot_ref.cpp), the same bits on every ISA
            ASSERT_EQ(got, ref) << type_name(t) << " n=" << n << " on " << cpu::isa_name(isa);
          } else {
            ASSERT_NEAR(got, ref, 2 * tolerance(n, c.magnitude))
                << type_name(t) << " n=" << n << " on " << cpu::isa_name(isa);
          }
        }
      }
    }
  }
  std::printf("  ISA paths tested: ");
  for (cpu::Isa isa : available_isas()) std::printf("%s ", cpu::isa_name(isa));
  std::printf("(detected %s)\n", cpu::isa_name(cpu::detected_isa()));
}

// The batched kernels (one weight row, nx activation rows) give each row the value vec_dot gives.
TEST(VecDot, BatchedKernelsMatchSingleRow) {
  IsaGuard guard;
  std::mt19937 rng(23);
  for (cpu::Isa isa : available_isas()) {
    const auto& kernels = cpu::detail::dot_kernels(isa);
    cpu::set_isa(isa);
    for (GgmlType t : kWeightTypes) {
      const int64_t n = 3 * (block_values(t) == 1 ? 85 : block_values(t));
      const GgmlType vt = cpu::vec_dot_type(t);
      const auto w = weight_row(rng, t, n);
      const size_t stride = row_bytes(vt, static_cast<uint64_t>(n)) + 40;  // padded rows
      std::vector<uint8_t> xs(stride * cpu::detail::kMaxNx);
      for (int j = 0; j < cpu::detail::kMaxNx; ++j) {
        const auto x = random_normal(rng, n);
        cpu::quantize_activation(t, x.data(), xs.data() + j * stride, n);
      }
      for (int nx = 1; nx <= cpu::detail::kMaxNx; ++nx) {
        float out[cpu::detail::kMaxNx];
        cpu::detail::dot_fn(kernels, t)(n, w.data(), xs.data(), stride, nx, out);
        for (int j = 0; j < nx; ++j) {
          const float single = cpu::vec_dot(t, w.data(), xs.data() + j * stride, n);
          ASSERT_EQ(out[j], single) << type_name(t) << " nx=" << nx << " row " << j << " on "
                                    << cpu::isa_name(isa);
        }
      }
    }
  }
}

// Every order a type has (dot_kernels.hpp: vec_dot's and those of llama.cpp's other kernels), on
// every ISA and for 1..4 activation rows at once, is bit for bit the scalar reference's in that
// order. Lengths of 1, 2, 3 and 17 blocks (odd block counts take IQ4_NL's and MXFP4's scalar tail).
TEST(VecDot, EveryOrderOnEveryIsaMatchesScalarReference) {
  using cpu::detail::DotOrder;
  std::mt19937 rng(24);
  const auto& scalar = cpu::detail::dot_kernels(cpu::Isa::scalar);
  int checked = 0;
  for (GgmlType t : kWeightTypes) {
    if (block_values(t) == 1) continue;  // float types: one order, checked within a bound above
    for (DotOrder o : {DotOrder::row, DotOrder::group4, DotOrder::tiled, DotOrder::repacked, DotOrder::tinyblas}) {
      const cpu::detail::DotFn ref = cpu::detail::dot_fn(scalar, t, o);
      if (o != DotOrder::row && ref == cpu::detail::dot_fn(scalar, t)) continue;  // the type has no such order
      for (int64_t blocks : {1, 2, 3, 17}) {
        const int64_t n = blocks * block_values(t);
        const GgmlType vt = cpu::vec_dot_type(t);
        const auto w = weight_row(rng, t, n);
        const size_t stride = row_bytes(vt, static_cast<uint64_t>(n)) + 8;
        std::vector<uint8_t> xs(stride * cpu::detail::kMaxNx);
        for (int j = 0; j < cpu::detail::kMaxNx; ++j)
          cpu::quantize_activation(t, random_normal(rng, n).data(), xs.data() + j * stride, n);
        float want[cpu::detail::kMaxNx];
        ref(n, w.data(), xs.data(), stride, cpu::detail::kMaxNx, want);
        for (cpu::Isa isa : available_isas()) {
          const cpu::detail::DotFn f = cpu::detail::dot_fn(cpu::detail::dot_kernels(isa), t, o);
          ASSERT_NE(f, nullptr) << type_name(t);
          for (int nx = 1; nx <= cpu::detail::kMaxNx; ++nx) {
            float got[cpu::detail::kMaxNx];
            f(n, w.data(), xs.data(), stride, nx, got);
            for (int j = 0; j < nx; ++j)
              ASSERT_EQ(got[j], want[j]) << type_name(t) << " order " << static_cast<int>(o) << " n=" << n
                                         << " nx=" << nx << " row " << j << " on " << cpu::isa_name(isa);
          }
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * (13 + 10));  // 13 quantized weight types' vec_dot orders and 10 other orders
}

// The several-rows kernels (DotRowsFn on AVX-512: the repacked order of Q4_0, IQ4_NL, MXFP4 and
// Q4_K's 1-row order) give
// each (weight row, activation row) the bits of the scalar reference in that order: 1..16 weight
// rows × 1..4 activation rows of 1, 2, 3 and 17 blocks at padded strides, nothing written outside
// the outputs; MXFP4 also with E8M0 scales over the whole byte range (the
// subnormal e = 0, 1 and the largest exponents), compared as bit patterns.
TEST(VecDot, RowsKernelsMatchScalarReference) {
  using cpu::detail::DotOrder;
  std::mt19937 rng(26);
  const auto& scalar = cpu::detail::dot_kernels(cpu::Isa::scalar);
  int checked = 0;
  for (cpu::Isa isa : available_isas()) {
    const auto& kernels = cpu::detail::dot_kernels(isa);
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q4_K}) {
      const DotOrder order = t == GgmlType::Q4_K ? DotOrder::row : DotOrder::repacked;
      const cpu::detail::DotRowsFn f = cpu::detail::dot_rows_fn(kernels, t, order);
      if (!f) continue;
      EXPECT_EQ(cpu::detail::dot_rows_fn(kernels, t, order == DotOrder::row ? DotOrder::repacked : DotOrder::row),
                nullptr);
      const cpu::detail::DotFn ref = cpu::detail::dot_fn(scalar, t, order);
      for (bool full_range : {false, true}) {
        if (full_range && t != GgmlType::MXFP4) continue;
        for (int64_t blocks : {1, 2, 3, 17}) {
          const int64_t n = blocks * block_values(t);
          const size_t wrb = row_bytes(t, static_cast<uint64_t>(n)), stride = wrb + 5;  // unaligned rows
          std::vector<uint8_t> w(stride * cpu::detail::kMaxRows);
          for (int r = 0; r < cpu::detail::kMaxRows; ++r) {
            const auto row = random_blocks(rng, t, n, full_range);
            std::memcpy(w.data() + r * stride, row.data(), wrb);
          }
          const size_t x_stride = row_bytes(cpu::vec_dot_type(t), static_cast<uint64_t>(n)) + 3;
          std::vector<uint8_t> xs(x_stride * cpu::detail::kMaxNx);
          for (int j = 0; j < cpu::detail::kMaxNx; ++j)
            cpu::quantize_activation(t, random_normal(rng, n).data(), xs.data() + j * x_stride, n);
          constexpr size_t kOut = cpu::detail::kMaxRows + 3;  // output row stride
          for (int nx = 1; nx <= cpu::detail::kMaxNx; ++nx)
            for (int nw = 1; nw <= cpu::detail::kMaxRows; ++nw) {
              std::vector<float> got(kOut * cpu::detail::kMaxNx, 12345.f);
              f(n, w.data(), stride, nw, xs.data(), x_stride, nx, got.data(), kOut);
              for (size_t k = 0; k < got.size(); ++k) {
                if (k % kOut >= static_cast<size_t>(nw) || k / kOut >= static_cast<size_t>(nx)) {
                  ASSERT_EQ(got[k], 12345.f) << type_name(t) << " nw=" << nw << " nx=" << nx << ": wrote " << k;
                }
              }
              for (int j = 0; j < nx; ++j)
                for (int r = 0; r < nw; ++r) {
                  float want;
                  ref(n, w.data() + r * stride, xs.data() + j * x_stride, 0, 1, &want);
                  uint32_t gb, wb;
                  std::memcpy(&gb, &got[j * kOut + r], 4);
                  std::memcpy(&wb, &want, 4);
                  ASSERT_EQ(gb, wb) << type_name(t) << " n=" << n << " nw=" << nw << " nx=" << nx << " row " << r
                                    << " x " << j << " (" << got[j * kOut + r] << " vs " << want << ") on "
                                    << cpu::isa_name(isa);
                }
            }
          ++checked;
        }
      }
    }
  }
  std::printf("  rows kernels checked: %d (type, length, ISA) cases\n", checked);
}

// The orders are distinguishable: each order other than vec_dot's gives a different float somewhere
// on random rows of 7 and 17 blocks, so a bit-exact comparison with one of ggml's kernels
// (test_ggml_oracle*.cpp) fails when Ferry adds in another kernel's order.
TEST(VecDot, OtherOrdersDifferFromVecDotSomewhere) {
  using cpu::detail::DotOrder;
  std::mt19937 rng(25);
  const auto& scalar = cpu::detail::dot_kernels(cpu::Isa::scalar);
  for (GgmlType t : kWeightTypes) {
    if (block_values(t) == 1) continue;
    for (DotOrder o : {DotOrder::group4, DotOrder::tiled, DotOrder::repacked, DotOrder::tinyblas}) {
      const cpu::detail::DotFn f = cpu::detail::dot_fn(scalar, t, o), row = cpu::detail::dot_fn(scalar, t);
      if (f == row) continue;
      int differ = 0;
      for (int rep = 0; rep < 40; ++rep) {
        const int64_t n = (rep % 2 ? 17 : 7) * block_values(t);
        const auto w = weight_row(rng, t, n);
        std::vector<uint8_t> xq(row_bytes(cpu::vec_dot_type(t), static_cast<uint64_t>(n)));
        cpu::quantize_activation(t, random_normal(rng, n).data(), xq.data(), n);
        float a, b;
        f(n, w.data(), xq.data(), 0, 1, &a);
        row(n, w.data(), xq.data(), 0, 1, &b);
        differ += a != b;
      }
      EXPECT_GT(differ, 0) << type_name(t) << " order " << static_cast<int>(o) << " always equals vec_dot's";
    }
  }
}

// Extreme levels: Q8_0 weights at −128 (possible in files from other quantizers) and full-scale
// activations must not saturate the 16-bit pair sums.
TEST(VecDot, ExtremeLevelsDoNotSaturate) {
  IsaGuard guard;
  std::vector<uint8_t> w(34 * 4), x(34 * 4);
  for (int b = 0; b < 4; ++b) {
    const uint16_t one = fp32_to_fp16(1.f);
    std::memcpy(w.data() + 34 * b, &one, 2);
    std::memcpy(x.data() + 34 * b, &one, 2);
    for (int j = 0; j < 32; ++j) {
      w[34 * b + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(-128));
      x[34 * b + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j % 2 ? -127 : 127));
    }
    x[34 * b + 2] = static_cast<uint8_t>(static_cast<int8_t>(-127));  // unbalanced: Σ ≠ 0
  }
  const float ref = cpu::vec_dot_ref(GgmlType::Q8_0, w.data(), x.data(), 128);
  EXPECT_EQ(ref, 4.f * (-128.f * -127.f * 2));  // per block: 15 pairs cancel, then −127, −127
  for (cpu::Isa isa : available_isas()) {
    cpu::set_isa(isa);
    EXPECT_EQ(cpu::vec_dot(GgmlType::Q8_0, w.data(), x.data(), 128), ref) << cpu::isa_name(isa);
  }
}

TEST(VecDot, RejectsBadInput) {
  std::vector<uint8_t> buf(4096);
  EXPECT_THROW(cpu::vec_dot(GgmlType::Q4_K, buf.data(), buf.data(), 100), Error);
  EXPECT_THROW(cpu::vec_dot(GgmlType::Q8_K, buf.data(), buf.data(), 256), Error);
  EXPECT_THROW(cpu::vec_dot_ref(GgmlType::IQ2_XXS, buf.data(), buf.data(), 256), Error);
  EXPECT_THROW(cpu::vec_dot(GgmlType::Q8_1, buf.data(), buf.data(), 32), Error);  // an activation type
}
