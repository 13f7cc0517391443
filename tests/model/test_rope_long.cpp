// NEOX RoPE far into the context (qwen35moe trains to 262144 positions, qwen3moe to 40960): the CPU
// op against a float64 reference at positions up to 262143. ggml (and so Ferry, for llama.cpp's
// bits) builds the angles in float by repeated multiplication, theta_j = pos·scale^j, so the angle
// error grows with the position and the pair index: each multiply and the float scale itself add
// at most half an ulp, |Δθ_j| ≤ (2j + 1)·2^-24·θ_j. The test holds every rotated value to the error
// that bound allows, and checks that the angles are exactly ggml's float ones.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/backend/cpu_ops.hpp"

namespace ferry {
namespace {

struct RopeCase {
  const char* name;
  int32_t head_dim, n_rot;
  float freq_base;
  int32_t max_pos;
};

void check_rope(const RopeCase& c) {
  const std::vector<int32_t> positions = {0, 1, 4095, 32767, c.max_pos / 2, c.max_pos - 1};
  const int64_t n = static_cast<int64_t>(positions.size()), n_head = 2;
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * n_head * c.head_dim));
  for (auto& v : x) v = d(rng);
  std::vector<float> y = x;
  CpuOps ops;
  ops.rope_neox(y.data(), n, n_head, n_head * c.head_dim, c.head_dim, c.n_rot, positions.data(), c.freq_base);

  const int32_t half = c.n_rot / 2;
  const float scale_f = std::pow(c.freq_base, -2.0f / static_cast<float>(c.n_rot));
  double worst_angle = 0, worst_value = 0;
  for (int64_t t = 0; t < n; ++t) {
    const double pos = positions[static_cast<size_t>(t)];
    float theta_f = static_cast<float>(positions[static_cast<size_t>(t)]);
    for (int32_t j = 0; j < half; ++j) {
      const double theta_d = pos * std::pow(static_cast<double>(c.freq_base), -2.0 * j / c.n_rot);
      const double bound = (2.0 * j + 1) * std::ldexp(1.0, -24) * theta_d + 1e-12;
      EXPECT_LE(std::fabs(theta_f - theta_d), bound) << c.name << " pos " << pos << " j " << j;
      worst_angle = std::max(worst_angle, std::fabs(theta_f - theta_d));
      for (int64_t h = 0; h < n_head; ++h) {
        const size_t base = static_cast<size_t>((t * n_head + h) * c.head_dim);
        const double a = x[base + j], b = x[base + j + half];
        // ggml's rotation with its float angle, then the float64 one.
        const double ya = a * std::cos(theta_d) - b * std::sin(theta_d);
        const double yb = a * std::sin(theta_d) + b * std::cos(theta_d);
        const double tol = (std::fabs(a) + std::fabs(b)) * (bound + 4e-7);
        EXPECT_NEAR(y[base + j], ya, tol) << c.name << " pos " << pos << " j " << j;
        EXPECT_NEAR(y[base + j + half], yb, tol) << c.name << " pos " << pos << " j " << j;
        worst_value = std::max({worst_value, std::fabs(y[base + j] - ya), std::fabs(y[base + j + half] - yb)});
        // and exactly ggml's float angle
        const float ca = std::cos(theta_f), sa = std::sin(theta_f);
        EXPECT_NEAR(y[base + j], static_cast<float>(a) * ca - static_cast<float>(b) * sa, 2e-6 * (std::fabs(a) + std::fabs(b)));
      }
      theta_f *= scale_f;
    }
    // Dimensions past n_rot are untouched.
    for (int64_t h = 0; h < n_head; ++h)
      for (int32_t i = c.n_rot; i < c.head_dim; ++i) {
        const size_t k = static_cast<size_t>((t * n_head + h) * c.head_dim + i);
        EXPECT_EQ(y[k], x[k]);
      }
  }
  std::printf("[rope] %s up to position %d: max angle error %.3g rad, max value error %.3g (float64 reference)\n",
              c.name, c.max_pos - 1, worst_angle, worst_value);
}

TEST(RopeLongContext, Qwen35MoeTo262143) { check_rope({"qwen35moe", 256, 64, 1e7f, 262144}); }
TEST(RopeLongContext, Qwen3MoeTo40959) { check_rope({"qwen3moe", 128, 128, 1e6f, 40960}); }

}  // namespace
}  // namespace ferry
