// CpuOps against straightforward double-precision references on random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

using test::nmse;

TEST(CpuOps, RmsnormStridedRows) {
  std::mt19937 rng(1);
  CpuOps ops;
  const int64_t rows = 6, n = 64, ld = 80;  // rows of 64 inside a stride of 80 (per-head norm)
  auto x = randn(static_cast<size_t>(rows * ld), rng), w = randn(n, rng);
  std::vector<float> y(x.size(), 7.0f);
  ops.rmsnorm(x.data(), w.data(), rows, n, ld, 1e-6f, y.data());
  std::vector<double> ref, got;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += double{x[r * ld + j]} * x[r * ld + j];
    const double s = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t j = 0; j < n; ++j) {
      ref.push_back(x[r * ld + j] * s * w[j]);
      got.push_back(y[r * ld + j]);
    }
    for (int64_t j = n; j < ld; ++j) EXPECT_EQ(y[r * ld + j], 7.0f);  // gaps untouched
  }
  std::vector<float> gotf(got.begin(), got.end());
  EXPECT_LT(nmse(gotf.data(), ref), 1e-12);
}

TEST(CpuOps, RopeNeoxPartial) {
  std::mt19937 rng(2);
  CpuOps ops;
  const int64_t T = 3, H = 2, D = 32;
  const int32_t n_rot = 16;
  const float base = 10000.0f;
  auto x = randn(static_cast<size_t>(T * H * D), rng);
  auto y = x;
  std::vector<int32_t> pos{0, 5, 77};
  ops.rope_neox(y.data(), T, H, H * D, D, n_rot, pos.data(), base);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* a = x.data() + (t * H + h) * D;
      const float* b = y.data() + (t * H + h) * D;
      for (int32_t j = 0; j < n_rot / 2; ++j) {
        const double th = pos[t] * std::pow(double{base}, -2.0 * j / n_rot);
        EXPECT_NEAR(b[j], a[j] * std::cos(th) - a[j + n_rot / 2] * std::sin(th), 2e-4);
        EXPECT_NEAR(b[j + n_rot / 2], a[j] * std::sin(th) + a[j + n_rot / 2] * std::cos(th), 2e-4);
      }
      for (int64_t d = n_rot; d < D; ++d) EXPECT_EQ(b[d], a[d]);  // dims past n_rot untouched
    }
}

// Naive causal GQA attention in double over float K/V.
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, const std::vector<float>* gate, int64_t T,
                                    int64_t H, int64_t Hkv, int64_t D, int64_t pos0, float scale) {
  std::vector<double> out(static_cast<size_t>(T * H * D), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv), n_kv = pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(n_kv));
      double mx = -1e300;
      for (int64_t j = 0; j < n_kv; ++j) {
        double d = 0;
        for (int64_t c = 0; c < D; ++c) d += double{q[(t * H + h) * D + c]} * k[(j * Hkv + hk) * D + c];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t c = 0; c < D; ++c) out[(t * H + h) * D + c] += s[j] / sum * v[(j * Hkv + hk) * D + c];
      if (gate)
        for (int64_t c = 0; c < D; ++c) out[(t * H + h) * D + c] /= 1.0 + std::exp(-(*gate)[(t * H + h) * D + c]);
    }
  return out;
}

void attention_case(GgmlType cache_type, bool with_gate, double bound) {
  std::mt19937 rng(3);
  CpuOps ops;
  const int64_t H = 4, Hkv = 2, D = 64, n_ctx = 40, prefix = 9, T = 6;
  const size_t eb = cache_type == GgmlType::F16 ? 2 : 4;
  DeviceBuffer kb = ops.alloc(n_ctx * Hkv * D * eb), vb = ops.alloc(n_ctx * Hkv * D * eb);
  KvLayerView kv{kb.data(), vb.data(), cache_type, cache_type, n_ctx, int32_t{Hkv}, int32_t{D}, int32_t{D}};
  // Fill positions [0, prefix) first, then [prefix, prefix + T) in the same call as attention.
  auto k_all = randn(static_cast<size_t>((prefix + T) * Hkv * D), rng);
  auto v_all = randn(static_cast<size_t>((prefix + T) * Hkv * D), rng);
  ops.kv_store(kv, 0, prefix, k_all.data(), v_all.data());
  ops.kv_store(kv, prefix, T, k_all.data() + prefix * Hkv * D, v_all.data() + prefix * Hkv * D);
  auto q = randn(static_cast<size_t>(T * H * D), rng);
  auto gate = randn(q.size(), rng);
  std::vector<float> out(q.size());
  AttentionArgs a;
  a.q = q.data();
  a.q_token_stride = H * D;
  a.q_head_stride = D;
  a.gate = with_gate ? gate.data() : nullptr;
  a.kv = kv;
  a.n_tokens = T;
  a.n_head = H;
  a.pos0 = prefix;
  a.scale = 1.0f / 8.0f;
  a.out = out.data();
  ops.attention(a);
  // The reference sees what the cache holds (F16-rounded when the cache is F16).
  if (cache_type == GgmlType::F16)
    for (auto* vec : {&k_all, &v_all})
      for (auto& e : *vec) e = fp16_to_fp32(fp32_to_fp16(e));
  const auto ref = naive_attention(q, k_all, v_all, with_gate ? &gate : nullptr, T, H, Hkv, D, prefix, a.scale);
  EXPECT_LT(nmse(out.data(), ref), bound);
}

TEST(CpuOps, AttentionF32Cache) { attention_case(GgmlType::F32, false, 1e-12); }
TEST(CpuOps, AttentionF16Cache) { attention_case(GgmlType::F16, false, 1e-6); }
TEST(CpuOps, AttentionGated) { attention_case(GgmlType::F32, true, 1e-12); }

TEST(CpuOps, AttentionRejectsOverflow) {
  CpuOps ops;
  DeviceBuffer kb = ops.alloc(4 * 8 * 4), vb = ops.alloc(4 * 8 * 4);
  KvLayerView kv{kb.data(), vb.data(), GgmlType::F32, GgmlType::F32, 4, 1, 8, 8};
  std::vector<float> k(5 * 8, 1.0f);
  EXPECT_THROW(ops.kv_store(kv, 2, 3, k.data(), k.data()), Error);
}

TEST(CpuOps, MoeRouteSoftmaxTopkRenormalise) {
  std::mt19937 rng(4);
  CpuOps ops;
  const int64_t T = 5;
  const int32_t NE = 16, K = 4;
  auto logits = randn(static_cast<size_t>(T * NE), rng, 2.0f);
  std::vector<int32_t> ids(T * K);
  std::vector<float> w(T * K);
  ops.moe_route(logits.data(), T, NE, K, true, 0.0f, ids.data(), w.data());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> order(NE);
    std::iota(order.begin(), order.end(), 0);
    const float* l = logits.data() + t * NE;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    double sum = 0;
    for (int32_t k = 0; k < K; ++k) sum += std::exp(double{l[order[k]]});
    for (int32_t k = 0; k < K; ++k) {
      EXPECT_EQ(ids[t * K + k], order[k]);
      EXPECT_NEAR(w[t * K + k], std::exp(double{l[order[k]]}) / sum, 1e-6);
    }
  }
  // Without renormalisation the weights are the softmax probabilities; a scale multiplies them.
  std::vector<float> w2(T * K);
  ops.moe_route(logits.data(), T, NE, K, false, 2.5f, ids.data(), w2.data());
  double z = 0;
  for (int32_t e = 0; e < NE; ++e) z += std::exp(double{logits[e]});
  EXPECT_NEAR(w2[0], 2.5 * std::exp(double{logits[ids[0]]}) / z, 1e-6);
}

TEST(CpuOps, ElementwiseAndArgmax) {
  std::mt19937 rng(5);
  CpuOps ops;
  auto g = randn(300, rng), u = randn(300, rng);
  std::vector<float> y(300);
  ops.swiglu(g.data(), u.data(), 3, 100, y.data());
  for (size_t i = 0; i < 300; ++i) EXPECT_NEAR(y[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
  auto d = randn(300, rng);
  auto d0 = d;
  std::vector<float> gl{0.3f, -1.2f, 2.0f};
  ops.sigmoid_gated_add(u.data(), gl.data(), 3, 100, d.data());
  for (size_t i = 0; i < 300; ++i) EXPECT_NEAR(d[i], d0[i] + u[i] / (1 + std::exp(-gl[i / 100])), 1e-6);
  std::vector<float> m{1, 5, 5, 2, -1, -3, -1, -2};
  std::vector<int32_t> am(2);
  ops.argmax(m.data(), 2, 4, am.data());
  EXPECT_EQ(am[0], 1);  // ties go to the lowest index
  EXPECT_EQ(am[1], 0);
}

}  // namespace
}  // namespace ferry
