// cpu_math: the vector exp/SiLU/softmax forms against scalar models of the same arithmetic
// (bit-exact), against libm (accuracy), and the special values (−inf → 0, overflow → inf).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "runtime/backend/cpu_ops_math.hpp"

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

}  // namespace
}  // namespace ferry
