// cpu_math: the vector exp/SiLU/softmax forms against scalar models of the same arithmetic
// (bit-exact), against libm (accuracy), and the special values (−inf → 0, overflow → inf).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry {
namespace {

using cpu_math::ExpForm;

std::vector<ExpForm> available_forms() {
  std::vector<ExpForm> f{ExpForm::sse2};
  if (cpu::detected_isa() >= cpu::Isa::avx2) f.push_back(ExpForm::avx2);
  if (cpu::detected_isa() >= cpu::Isa::avx512 && __builtin_cpu_supports("avx512dq")) f.push_back(ExpForm::avx512);
  return f;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CpuMath, ExpFormsAreAccurate) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-80.0f, 80.0f);
  for (ExpForm f : {ExpForm::sse2, ExpForm::avx2, ExpForm::avx512}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = d(rng);
      const double ref = std::exp(double{x});
      EXPECT_NEAR(cpu_math::expf_form(f, x) / ref, 1.0, 4e-7) << "x=" << x << " form " << static_cast<int>(f);
    }
    EXPECT_EQ(cpu_math::expf_form(f, -INFINITY), 0.0f);
    EXPECT_EQ(cpu_math::expf_form(f, 0.0f), 1.0f);
    EXPECT_TRUE(std::isinf(cpu_math::expf_form(f, 100.0f)));
    EXPECT_EQ(cpu_math::expf_form(f, -120.0f), 0.0f);
  }
}

TEST(CpuMath, VectorSwigluMatchesScalarModelBitForBit) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const int64_t n = 203;  // full chunks of every width plus a libm tail
  std::vector<float> x(n), g(n), y(n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : g) v = nd(rng);
  x[5] = -200.0f;  // exp overflow lane: silu → -0
  x[6] = 200.0f;
  for (ExpForm f : available_forms()) {
    const int64_t w = static_cast<int64_t>(f);
    cpu_math::swiglu(f, x.data(), g.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float e = i < n / w * w ? cpu_math::expf_form(f, 0.0f - x[i]) : std::exp(-x[i]);
      const float want = x[i] / (1.0f + e) * g[i];
      EXPECT_EQ(bits(y[i]), bits(want)) << "i=" << i << " x=" << x[i] << " form " << w;
    }
  }
}

TEST(CpuMath, ExpSumMatchesScalarModel) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t n = 77;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = nd(rng);
  x[10] = -INFINITY;  // masked entry
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  for (ExpForm f : available_forms()) {
    const int64_t w = static_cast<int64_t>(f);
    const double sum = cpu_math::exp_sum(f, x.data(), y.data(), n, mx);
    EXPECT_EQ(y[10], 0.0f);
    double want_sum = 0.0;
    int64_t i = 0;
    for (; i + w <= n; i += w) {
      float t[16] = {};
      for (int64_t l = 0; l < w; ++l) {
        t[l] = cpu_math::expf_form(f, x[i + l] - mx);
        EXPECT_EQ(bits(y[i + l]), bits(t[l])) << "i=" << i + l << " form " << w;
      }
      // Chunk reductions: 16 → halves, quarters, pairs; 8 → halves, then pairs; 4 → pairs.
      if (w == 16)
        for (int l = 0; l < 8; ++l) t[l] += t[l + 8];
      if (w >= 8)
        for (int l = 0; l < 4; ++l) t[l] += t[l + 4];
      want_sum += static_cast<double>((t[0] + t[2]) + (t[1] + t[3]));
    }
    for (; i < n; ++i) {
      EXPECT_EQ(bits(y[i]), bits(std::exp(x[i] - mx)));
      want_sum += static_cast<double>(std::exp(x[i] - mx));
    }
    EXPECT_EQ(sum, want_sum) << "form " << w;
  }
}

TEST(CpuMath, LaneDotMatchesItsScalarModel) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t n = 128;
  std::vector<float> k(n), q(n);
  std::vector<uint16_t> k16(n);
  for (int32_t i = 0; i < n; ++i) {
    k[i] = nd(rng);
    q[i] = nd(rng);
    k16[i] = fp32_to_fp16(k[i]);
  }
  for (int W : {8, 16}) {
    if (W == 16 && !(cpu::detected_isa() >= cpu::Isa::avx512)) continue;
    for (bool f16 : {false, true}) {
      const void* kp = f16 ? static_cast<const void*>(k16.data()) : k.data();
      const float got = cpu_math::dot_lanes(kp, f16, q.data(), n, W);
      EXPECT_EQ(bits(got), bits(cpu_math::dot_lanes_scalar(kp, f16, q.data(), n, W))) << "W=" << W;
      double ref = 0;
      for (int32_t i = 0; i < n; ++i) ref += double{f16 ? fp16_to_fp32(k16[i]) : k[i]} * q[i];
      EXPECT_NEAR(got, ref, 1e-4);
    }
  }
  // The lane tree adds lanes in tinyBLAS's order (not left to right).
  const float l[8] = {1e8f, 1.0f, -1e8f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(cpu_math::lane_tree(l, 8), ((l[4] + l[0]) + (l[6] + l[2])) + ((l[5] + l[1]) + (l[7] + l[3])));
}

// The F16 accumulator steps of flash attention with an F16 V: the F16C form equals the scalar
// formula bit for bit, including values that round to subnormals and overflow to infinity, on a
// length with a scalar tail.
TEST(CpuMath, F16AccumulatorStepsMatchTheScalarFormula) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t n = 133;
  std::vector<uint16_t> v(n), acc0(n);
  for (int32_t i = 0; i < n; ++i) {
    const float scale = i % 17 == 0 ? 6e4f : i % 13 == 0 ? 1e-6f : 3.0f;
    v[i] = fp32_to_fp16(nd(rng) * scale);
    acc0[i] = fp32_to_fp16(nd(rng) * scale);
  }
  for (const ExpForm form : available_forms()) {
    cpu_math::request_exp_form(form);
    for (const float p : {0.7311f, 1.0f, 1e-3f, 1.9f}) {
      std::vector<uint16_t> got = acc0, want = acc0;
      cpu_math::axpy_f16(p, v.data(), got.data(), n);
      for (int32_t d = 0; d < n; ++d) want[d] = fp32_to_fp16(std::fma(fp16_to_fp32(v[d]), p, fp16_to_fp32(want[d])));
      EXPECT_EQ(got, want) << "axpy, form " << static_cast<int>(form) << ", p " << p;
      cpu_math::scale_f16(p, got.data(), n);
      for (int32_t d = 0; d < n; ++d) want[d] = fp32_to_fp16(fp16_to_fp32(want[d]) * p);
      EXPECT_EQ(got, want) << "scale, form " << static_cast<int>(form) << ", p " << p;
    }
  }
  cpu_math::request_exp_form(std::nullopt);
}

TEST(CpuMath, VecdotAndRotationAreAccurate) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int32_t n : {7, 32, 96, 100}) {
    std::vector<float> w(n), x(n);
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng);
    double ref = 0;
    for (int32_t i = 0; i < n; ++i) ref += double{w[i]} * x[i];
    EXPECT_NEAR(cpu_math::dot_vecdot(w.data(), x.data(), false, n), ref, 1e-5) << n;
  }
  std::vector<float> a{1.0f, 0.5f}, b{2.0f, -1.0f};
  const float cs[4] = {std::cos(0.3f), std::sin(0.3f), std::cos(1.1f), std::sin(1.1f)};
  cpu_math::rotate_pairs(a.data(), b.data(), cs, 2);
  EXPECT_NEAR(a[0], 1.0 * std::cos(0.3) - 2.0 * std::sin(0.3), 1e-6);
  EXPECT_NEAR(b[1], 0.5 * std::sin(1.1) - 1.0 * std::cos(1.1), 1e-6);
}

}  // namespace
}  // namespace ferry
