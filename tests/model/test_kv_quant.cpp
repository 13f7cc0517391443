// Quantized KV caches on the CPU: kv_store writes each token's row as ggml-cpu writes it, attention
// over every (K type, V type) pair agrees with a double-precision reference that sees the cache's
// dequantized contents, decode equals the matching row of a prefill, the cache and the placement
// count the real bytes per type, and replicate (the bench's copied depth) copies whole rows.
// Random data throughout (never zeros).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/hadamard.hpp"
#include "kernels/cpu/quants.hpp"
#include "model_test_util.hpp"
#include "runtime/moe/cpu_executor.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"

namespace ferry {
namespace {

constexpr GgmlType kKvTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                 GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                 GgmlType::IQ4_NL, GgmlType::Q5_0, GgmlType::Q5_1};

bool plain(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::F32; }
bool block_type(GgmlType t) { return type_info(t).block_values > 1; }

// x with each head row of d values Hadamard-rotated as llama.cpp rotates a quantized cache's rows
// (n_rot: kv_rotation_k / _v; 0 leaves x as it is).
std::vector<float> rotated(std::vector<float> x, int32_t n_rot) {
  if (n_rot) cpu::hadamard_rotate(x.data(), static_cast<int64_t>(x.size()), n_rot);
  return x;
}

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

struct Cache {
  DeviceBuffer k, v;
  KvLayerView view;
  Cache(CpuOps& ops, GgmlType tk, GgmlType tv, int64_t n_ctx, int32_t n_head_kv, int32_t d) {
    view = KvLayerView{nullptr, nullptr, tk, tv, n_ctx, n_head_kv, d, d};
    k = ops.alloc(n_ctx * n_head_kv * view.k_head_bytes());
    v = ops.alloc(n_ctx * n_head_kv * view.v_head_bytes());
    view.k = k.data();
    view.v = v.data();
  }
  // The cache's contents as floats: (rows, n_head_kv·d).
  std::vector<float> dequantized(bool of_k, int64_t rows) const {
    const GgmlType t = of_k ? view.type_k : view.type_v;
    const int64_t w = int64_t{view.n_head_kv} * view.head_dim_k;
    std::vector<float> out(static_cast<size_t>(rows * w));
    cpu::dequantize_row_ref(t, of_k ? view.k : view.v, out.data(), rows * w);
    return out;
  }
};

TEST(KvQuant, StoreWritesWhatGgmlCpuWrites) {
  std::mt19937 rng(16);
  CpuOps ops;
  const int32_t Hkv = 2, D = 64;
  const int64_t n_ctx = 12, W = Hkv * D;
  for (GgmlType t : kKvTypes) {
    Cache c(ops, t, t, n_ctx, Hkv, D);
    auto k = randn(static_cast<size_t>(n_ctx * W), rng, 2.0f), v = randn(k.size(), rng, 0.5f);
    ops.kv_store(c.view, 0, 5, k.data(), v.data());
    ops.kv_store(c.view, 5, n_ctx - 5, k.data() + 5 * W, v.data() + 5 * W);
    // A quantized cache holds the rows Hadamard-rotated (K: 64 for D = 64, V: 64).
    const auto kr = rotated(k, cpu::kv_rotation_k(block_type(t), D)), vr = rotated(v, cpu::kv_rotation_v(block_type(t), D));
    EXPECT_EQ(cpu::kv_rotation_k(block_type(t), D), block_type(t) ? 64 : 0);
    const size_t bytes = row_bytes(t, static_cast<uint64_t>(n_ctx * W));
    std::vector<uint8_t> want_k(bytes), want_v(bytes), ref(bytes);
    for (int64_t r = 0; r < n_ctx; ++r) {
      const size_t rb = bytes / n_ctx;
      cpu::quantize_row_cpu(t, kr.data() + r * W, want_k.data() + r * rb, W);
      cpu::quantize_row_cpu(t, vr.data() + r * W, want_v.data() + r * rb, W);
    }
    EXPECT_EQ(std::memcmp(c.k.data(), want_k.data(), bytes), 0) << type_name(t);
    EXPECT_EQ(std::memcmp(c.v.data(), want_v.data(), bytes), 0) << type_name(t);
    // Every type but Q8_0 is ggml's reference quantizer (Q8_0: x86 ggml's SIMD variant).
    cpu::quantize_row_ref(t, kr.data(), ref.data(), n_ctx * W);
    if (t != GgmlType::Q8_0) {
      EXPECT_EQ(std::memcmp(ref.data(), want_k.data(), bytes), 0) << type_name(t);
    }
    // And the rows hold the values: dequantized K close to the input.
    const auto back = c.dequantized(true, n_ctx);
    EXPECT_LT(test::nmse(back.data(), kr.data(), kr.size()), type_info(t).block_bytes == 18 || t == GgmlType::Q4_1 ? 2e-2 : 5e-3)
        << type_name(t);
  }
}

// Naive causal GQA attention in double; q_ref is the query as the kernel dots it.
std::vector<double> naive(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          const std::vector<float>* gate, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                          int64_t pos0, float scale) {
  std::vector<double> out(static_cast<size_t>(T * H * D), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv), n_kv = pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(n_kv));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n_kv; ++j) {
        double d = 0;
        for (int64_t c = 0; c < D; ++c) d += double{q[(t * H + h) * D + c]} * k[(j * Hkv + hk) * D + c];
        mx = std::max(mx, s[j] = d * scale);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t c = 0; c < D; ++c) out[(t * H + h) * D + c] += s[j] / sum * v[(j * Hkv + hk) * D + c];
      if (gate)
        for (int64_t c = 0; c < D; ++c) out[(t * H + h) * D + c] /= 1.0 + std::exp(-(*gate)[(t * H + h) * D + c]);
    }
  return out;
}

using test::nmse;

void run_attention(CpuOps& ops, const KvLayerView& kv, const float* q, const float* gate, int32_t T, int32_t H,
                   int64_t pos0, float* out) {
  AttentionArgs a;
  a.q = q;
  a.q_token_stride = int64_t{H} * kv.head_dim_k;
  a.q_head_stride = kv.head_dim_k;
  a.gate = gate;
  a.kv = kv;
  a.n_tokens = T;
  a.n_head = H;
  a.pos0 = pos0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kv.head_dim_k));
  a.out = out;
  ops.attention(a);
}

// Every pair of the nine types, prefill (6 tokens after a prefix of 13) with the qwen35 gate on
// half of them. The reference sees the dequantized (rotated) cache and, on the flash-attention path
// (any pair that is not F16/F32 only), the query as the kernel dots it (rotated like K, converted to
// vec_dot_type(K)): what remains is float rounding, and the F16 accumulator where V is F16.
TEST(KvQuant, AttentionEveryPairMatchesReference) {
  std::mt19937 rng(17);
  CpuOps ops;
  const int32_t H = 4, Hkv = 2, D = 64, T = 6;
  const int64_t prefix = 13, n_ctx = prefix + T, W = Hkv * D;
  int pair = 0;
  for (GgmlType tk : kKvTypes)
    for (GgmlType tv : kKvTypes) {
      Cache c(ops, tk, tv, n_ctx, Hkv, D);
      auto k = randn(static_cast<size_t>(n_ctx * W), rng), v = randn(k.size(), rng);
      ops.kv_store(c.view, 0, n_ctx, k.data(), v.data());
      auto q = randn(static_cast<size_t>(T * H * D), rng, 1.5f), gate = randn(q.size(), rng);
      const bool gated = ++pair % 2 == 0;
      std::vector<float> out(q.size());
      run_attention(ops, c.view, q.data(), gated ? gate.data() : nullptr, T, H, prefix, out.data());
      const bool flash = !plain(tk) || !plain(tv);
      const int32_t n_rot_k = cpu::kv_rotation_k(block_type(tk), D), n_rot_v = cpu::kv_rotation_v(block_type(tv), D);
      std::vector<float> q_ref = rotated(q, n_rot_k);
      if (flash) {
        const GgmlType qt = cpu::vec_dot_type(tk);
        std::vector<uint8_t> qq(row_bytes(qt, D));
        for (size_t r = 0; r < q.size() / D; ++r) {
          cpu::quantize_activation(tk, q_ref.data() + r * D, qq.data(), D);
          cpu::dequantize_row_ref(qt, qq.data(), q_ref.data() + r * D, D);
        }
      }
      // The reference attends over the rotated cache, rotates its output back, then gates it.
      auto ref = naive(q_ref, c.dequantized(true, n_ctx), c.dequantized(false, n_ctx), nullptr, T, H, Hkv, D,
                       prefix, 1.0f / 8.0f);
      if (n_rot_v) {
        std::vector<float> rf(ref.begin(), ref.end());
        cpu::hadamard_rotate(rf.data(), static_cast<int64_t>(rf.size()), n_rot_v);
        ref.assign(rf.begin(), rf.end());
      }
      if (gated)
        for (size_t i = 0; i < ref.size(); ++i) ref[i] /= 1.0 + std::exp(-double{gate[i]});
      // F16 V: llama.cpp's F16 probabilities (non-flash) or F16 accumulator (flash); F16 K without
      // flash: the query rounded to F16 as ggml does; Q4_1/Q5_1 K: the Q8_1 query's F16 sum field
      // (d·Σq, rounded) carries the min term of the dot — none of these modelled by the reference.
      const bool q81 = tk == GgmlType::Q4_1 || tk == GgmlType::Q5_1;
      const double bound = tv == GgmlType::F16 || (!flash && tk == GgmlType::F16) ? 2e-6 : q81 ? 2e-7 : 1e-10;
      EXPECT_LT(nmse(out.data(), ref), bound) << type_name(tk) << "/" << type_name(tv);
    }
}

// A one-token step (decode) gives the bits of the same token's row in a prefill.
TEST(KvQuant, DecodeEqualsPrefillRow) {
  std::mt19937 rng(18);
  CpuOps ops;
  const int32_t H = 4, Hkv = 1, D = 128, T = 5;
  const int64_t n_ctx = 40, W = Hkv * D;
  for (auto [tk, tv] : {std::pair{GgmlType::Q8_0, GgmlType::Q4_0}, std::pair{GgmlType::F16, GgmlType::Q5_1},
                        std::pair{GgmlType::BF16, GgmlType::BF16}, std::pair{GgmlType::IQ4_NL, GgmlType::F16}}) {
    Cache c(ops, tk, tv, n_ctx, Hkv, D);
    auto k = randn(static_cast<size_t>(n_ctx * W), rng), v = randn(k.size(), rng);
    ops.kv_store(c.view, 0, n_ctx, k.data(), v.data());
    auto q = randn(static_cast<size_t>(T * H * D), rng);
    std::vector<float> pre(q.size()), one(static_cast<size_t>(H * D));
    run_attention(ops, c.view, q.data(), nullptr, T, H, 20, pre.data());
    for (int32_t t = 0; t < T; ++t) {
      run_attention(ops, c.view, q.data() + t * H * D, nullptr, 1, H, 20 + t, one.data());
      EXPECT_EQ(std::memcmp(one.data(), pre.data() + t * H * D, one.size() * 4), 0)
          << type_name(tk) << "/" << type_name(tv) << " token " << t;
    }
  }
}

// llama.cpp's rotation: orthonormal and its own inverse, sizes as llama-kv-cache.cpp picks them.
TEST(KvQuant, HadamardRotationIsSelfInverse) {
  std::mt19937 rng(19);
  for (int32_t n : {64, 128, 256}) {
    const auto x = randn(static_cast<size_t>(3 * n), rng);
    const auto y = rotated(x, n), z = rotated(y, n);
    double nx = 0, ny = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      nx += double{x[i]} * x[i];
      ny += double{y[i]} * y[i];
      EXPECT_NEAR(z[i], x[i], 1e-5f);
    }
    EXPECT_NEAR(ny / nx, 1.0, 1e-6);
  }
  EXPECT_EQ(cpu::kv_rotation_k(true, 128), 128);
  EXPECT_EQ(cpu::kv_rotation_k(true, 192), 64);
  EXPECT_EQ(cpu::kv_rotation_k(true, 256), 256);
  EXPECT_EQ(cpu::kv_rotation_k(true, 96), 0);
  EXPECT_EQ(cpu::kv_rotation_k(false, 128), 0);
  EXPECT_EQ(cpu::kv_rotation_v(true, 256), 64);
  EXPECT_EQ(cpu::kv_rotation_v(false, 256), 0);
}

TEST(KvQuant, UnsupportedTypesAndHeadSizesAreRejected) {
  CpuOps ops;
  ModelConfig c;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim_k = c.head_dim_v = 48;  // not a multiple of 32
  c.layer_kind.assign(1, LayerKind::attention);
  try {
    KvCache kv(ops, c, 8, GgmlType::Q4_K, GgmlType::F16);
    ADD_FAILURE() << "Q4_K accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iq4_nl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(KvCache(ops, c, 8, GgmlType::Q8_0, GgmlType::F16), Error);
  EXPECT_NO_THROW(KvCache(ops, c, 8, GgmlType::BF16, GgmlType::F32));
}

// replicate (the bench's depth by copy) fills [n_have, n_to) with the first n_have rows,
// cyclically, in every attention layer, and leaves the rows past n_to alone.
TEST(KvQuant, ReplicateCopiesRowsCyclically) {
  CpuOps ops;
  ModelConfig c;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim_k = c.head_dim_v = 64;
  c.layer_kind = {LayerKind::attention, LayerKind::deltanet, LayerKind::attention};
  const int64_t n_ctx = 24, n_have = 5, n_to = 17;
  KvCache kv(ops, c, n_ctx, GgmlType::Q8_0, GgmlType::Q4_0);
  std::mt19937 rng(3);
  std::vector<std::vector<uint8_t>> before;
  for (int32_t il : {0, 2})
    for (void* base : {kv.layer(il).k, kv.layer(il).v}) {
      const KvLayerView& v = kv.layer(il);
      const size_t head_bytes = base == v.k ? v.k_head_bytes() : v.v_head_bytes();
      std::vector<uint8_t> b(static_cast<size_t>(n_ctx) * static_cast<size_t>(v.n_head_kv) *
                             head_bytes);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      ops.to_device(base, b.data(), b.size());
      before.push_back(std::move(b));
    }
  kv.replicate(ops, n_have, n_to);
  size_t i = 0;
  for (int32_t il : {0, 2})
    for (void* base : {kv.layer(il).k, kv.layer(il).v}) {
      const std::vector<uint8_t>& b = before[i++];
      const size_t row = b.size() / static_cast<size_t>(n_ctx);
      std::vector<uint8_t> after(b.size());
      ops.to_host(after.data(), base, after.size());
      for (int64_t pos = 0; pos < n_ctx; ++pos) {
        const int64_t src = pos < n_have || pos >= n_to ? pos : pos % n_have;
        EXPECT_EQ(0, std::memcmp(after.data() + pos * row, b.data() + src * row, row))
            << "layer " << il << " pos " << pos;
      }
    }
  EXPECT_THROW(kv.replicate(ops, n_have, n_ctx + 1), Error);
  EXPECT_THROW(kv.replicate(ops, 0, 4), Error);
}

// The placement's KV bytes are the cache's real ones: whole blocks per head row.
TEST(KvQuant, FootprintCountsBlockBytes) {
  synth::Options o;
  o.arch = synth::Arch::qwen35moe;
  o.preset = synth::Preset::tiny;
  const std::string path = test::write_plan(synth::make_plan(o), "kvq-qwen35moe");
  gguf::File f = gguf::File::open(path);
  CpuOps ops;
  auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); });
  const auto fp = [&](GgmlType tk, GgmlType tv) { return state_footprint(m->config(), StateOptions{96, tk, tv, 8}); };
  const uint64_t f16 = fp(GgmlType::F16, GgmlType::F16).kv_bytes;
  ASSERT_GT(f16, 0u);
  // F16 holds 2 bytes a value; Q8_0 34 bytes / 32, Q4_0 and IQ4_NL 18 / 32, Q5_1 24 / 32.
  EXPECT_EQ(fp(GgmlType::Q8_0, GgmlType::Q8_0).kv_bytes * 64, f16 * 34);
  EXPECT_EQ(fp(GgmlType::Q4_0, GgmlType::IQ4_NL).kv_bytes * 64, f16 * 18);
  EXPECT_EQ(fp(GgmlType::F16, GgmlType::Q5_1).kv_bytes * 128, f16 * (64 + 24));
  for (auto [tk, tv] : {std::pair{GgmlType::Q8_0, GgmlType::Q4_1}, std::pair{GgmlType::BF16, GgmlType::Q5_0}}) {
    const auto st = m->new_state(StateOptions{96, tk, tv, 8});
    const StateFootprint s = fp(tk, tv);
    EXPECT_EQ(s.kv_bytes + s.recurrent_bytes + s.workspace_bytes, st->bytes());
  }
  test::remove_scratch();
}

}  // namespace
}  // namespace ferry
