// Quantized KV caches on CUDA against the CPU backend (the one the oracle tests hold to llama.cpp):
// CudaOps::kv_store must write the CPU's bytes for every KV type (rotation included), and
// CudaOps::attention over such caches, decode and prefill, must give the CPU's outputs.
#include "tests/gpu/gpu_test_util.hpp"

#include <cstring>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"
#include "tests/gpu/backend_pair.hpp"

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

constexpr GgmlType kKvTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,  GgmlType::Q4_0,
                                 GgmlType::Q4_1, GgmlType::IQ4_NL, GgmlType::Q5_0, GgmlType::Q5_1};

// A cache of one layer on both backends, same shape and types; both start as the same garbage.
struct TwinCache {
  std::vector<uint8_t> k_cpu, v_cpu;
  DeviceBuffer k_gpu, v_gpu;
  KvLayerView cpu, gpu;
  TwinCache(Backends& b, GgmlType tk, GgmlType tv, int64_t n_ctx, int32_t n_kv, int32_t hd) {
    cpu = KvLayerView{nullptr, nullptr, tk, tv, n_ctx, n_kv, hd, hd};
    const size_t kb = static_cast<size_t>(n_ctx) * n_kv * cpu.k_head_bytes(), vb = static_cast<size_t>(n_ctx) * n_kv * cpu.v_head_bytes();
    k_cpu.assign(kb, 0xA5);
    v_cpu.assign(vb, 0x5A);
    k_gpu = b.up(k_cpu);
    v_gpu = b.up(v_cpu);
    cpu.k = k_cpu.data();
    cpu.v = v_cpu.data();
    gpu = cpu;
    gpu.k = k_gpu.data();
    gpu.v = v_gpu.data();
  }
};

// Cache values as attention sees them after RoPE: random, a few large outliers (what the rotation
// is for), never all zero.
std::vector<float> kv_values(int64_t n, uint32_t seed) {
  auto v = random_floats(static_cast<size_t>(n), seed, -1.f, 1.f);
  for (int64_t i = 0; i < n; i += 37) v[static_cast<size_t>(i)] *= 8.f;
  return v;
}

std::string pair_name(GgmlType k, GgmlType v) { return std::string(type_name(k)) + "/" + std::string(type_name(v)); }

TEST(GpuKvQuant, TakesTheNineTypes) {
  FERRY_REQUIRE_GPU();
  Backends b;
  for (GgmlType t : kKvTypes) EXPECT_TRUE(b.gpu->kv_type_supported(t)) << type_name(t);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::IQ4_XS})
    EXPECT_FALSE(b.gpu->kv_type_supported(t)) << type_name(t);
}

// (a) Every type, K and V (K rotated in chunks of the head size, V in chunks of 64): the device
// bytes equal the CPU's, for a batch at p0 > 0 after an earlier one; rows outside stay untouched.
TEST(GpuKvQuant, StoreWritesTheCpuBytes) {
  FERRY_REQUIRE_GPU();
  Backends b;
  for (int32_t hd : {32, 64, 128, 256}) {
    const int32_t n_kv = 2;
    const int64_t n_ctx = 12;
    for (GgmlType t : kKvTypes) {
      TwinCache c(b, t, t, n_ctx, n_kv, hd);
      int64_t p0 = 0;
      for (int64_t n_tokens : {5, 3}) {
        const auto k = kv_values(n_tokens * n_kv * hd, 100 + hd + static_cast<uint32_t>(t) + static_cast<uint32_t>(p0));
        const auto v = kv_values(n_tokens * n_kv * hd, 200 + hd + static_cast<uint32_t>(t) + static_cast<uint32_t>(p0));
        auto dk = b.up(k), dv = b.up(v);
        b.cpu.kv_store(c.cpu, p0, n_tokens, k.data(), v.data());
        b.gpu->kv_store(c.gpu, p0, n_tokens, dk.f32(), dv.f32());
        p0 += n_tokens;
      }
      const auto kg = b.down<uint8_t>(c.k_gpu, c.k_cpu.size()), vg = b.down<uint8_t>(c.v_gpu, c.v_cpu.size());
      const std::string shape = "2 heads d=" + std::to_string(hd) + " 5+3 tokens of 12";
      const size_t block = static_cast<size_t>(row_bytes(t, type_info(t).block_values));
      report_bytes("CudaOps::kv_store K vs CpuOps " + std::string(type_name(t)), shape, c.k_cpu, kg, block);
      report_bytes("CudaOps::kv_store V vs CpuOps " + std::string(type_name(t)), shape, c.v_cpu, vg, block);
    }
  }
}

// Blocks of zeros (a head of zeros: its rotated chunks are zeros too) take d = 0 and, for IQ4_NL,
// the levels of the block before them, as ggml's quantizers leave them.
TEST(GpuKvQuant, StoreZeroBlocksLikeTheCpu) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int32_t n_kv = 4, hd = 128;
  for (GgmlType t : kKvTypes) {
    TwinCache c(b, t, t, 4, n_kv, hd);
    auto k = kv_values(2 * n_kv * hd, 7), v = kv_values(2 * n_kv * hd, 8);
    for (int i = 0; i < hd; ++i) {
      k[hd + i] = v[hd + i] = 0.f;                  // token 0, head 1
      k[n_kv * hd + i] = v[n_kv * hd + i] = 0.f;    // token 1, head 0 (no block before it in the row)
    }
    auto dk = b.up(k), dv = b.up(v);
    b.cpu.kv_store(c.cpu, 1, 2, k.data(), v.data());
    b.gpu->kv_store(c.gpu, 1, 2, dk.f32(), dv.f32());
    const size_t block = static_cast<size_t>(row_bytes(t, type_info(t).block_values));
    report_bytes("CudaOps::kv_store zero heads K vs CpuOps", std::string(type_name(t)), c.k_cpu,
                 b.down<uint8_t>(c.k_gpu, c.k_cpu.size()), block);
    report_bytes("CudaOps::kv_store zero heads V vs CpuOps", std::string(type_name(t)), c.v_cpu,
                 b.down<uint8_t>(c.v_gpu, c.v_cpu.size()), block);
  }
}

// (b) Attention over caches the two backends filled alike: a 40-token prefill (tiled kernel),
// decode steps (rows kernel) and a decode step past 128 keys (split-K + combine), with a gate.
struct AttnCase {
  GgmlType k, v;
  int32_t head_dim;
  bool gate;
};

void run_attention_case(Backends& b, const AttnCase& ac, double bound) {
  const int32_t n_head = 8, n_kv = 2, hd = ac.head_dim;
  const int64_t n_ctx = 180, q_head_stride = ac.gate ? 2 * hd : hd, q_token_stride = n_head * q_head_stride;
  TwinCache c(b, ac.k, ac.v, n_ctx, n_kv, hd);
  int64_t pos0 = 0;
  // 40 prefill (tiled), 1 and 3 decode (rows), 120 more prefill, then 1 decode at 164 keys (split).
  for (int64_t n_tokens : {40, 1, 3, 120, 1}) {
    const uint32_t seed = static_cast<uint32_t>(pos0) * 7 + static_cast<uint32_t>(ac.k) * 131 + static_cast<uint32_t>(ac.v);
    const auto q = random_floats(n_tokens * q_token_stride, seed + 1, -2.f, 2.f);
    const auto k = kv_values(n_tokens * n_kv * hd, seed + 2), v = kv_values(n_tokens * n_kv * hd, seed + 3);
    auto dq = b.up(q), dk = b.up(k), dv = b.up(v);
    b.cpu.kv_store(c.cpu, pos0, n_tokens, k.data(), v.data());
    b.gpu->kv_store(c.gpu, pos0, n_tokens, dk.f32(), dv.f32());
    std::vector<float> out(n_tokens * n_head * hd);
    DeviceBuffer dout = b.gpu->alloc(out.size() * 4);
    AttentionArgs a;
    a.q = q.data();
    a.q_token_stride = q_token_stride;
    a.q_head_stride = q_head_stride;
    a.gate = ac.gate ? q.data() + hd : nullptr;
    a.kv = c.cpu;
    a.n_tokens = static_cast<int32_t>(n_tokens);
    a.n_head = n_head;
    a.pos0 = pos0;
    a.scale = 1.f / std::sqrt(static_cast<float>(hd)) * 2.f;  // sharper than random data gives
    a.out = out.data();
    b.cpu.attention(a);
    a.q = dq.f32();
    a.gate = ac.gate ? dq.f32() + hd : nullptr;
    a.kv = c.gpu;
    a.out = dout.f32();
    b.gpu->attention(a);
    report("CudaOps::attention vs CpuOps", pair_name(ac.k, ac.v) + " 8/2h d=" + std::to_string(hd) + (ac.gate ? " gated" : "") +
                                               " p0=" + std::to_string(pos0) + " n=" + std::to_string(n_tokens),
           nmse(out, b.down<float>(dout, out.size())), bound);
    pos0 += n_tokens;
  }
}

TEST(GpuKvQuant, AttentionMatchesCpu) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const AttnCase cases[] = {
      {GgmlType::Q8_0, GgmlType::Q8_0, 128, false}, {GgmlType::Q8_0, GgmlType::Q4_0, 128, true},
      {GgmlType::Q4_0, GgmlType::Q4_0, 64, false},  {GgmlType::Q5_1, GgmlType::IQ4_NL, 128, false},
      {GgmlType::BF16, GgmlType::Q5_0, 256, true},  {GgmlType::F16, GgmlType::Q8_0, 128, false},
      {GgmlType::Q4_1, GgmlType::F32, 64, false},   {GgmlType::IQ4_NL, GgmlType::BF16, 32, false},
      {GgmlType::F32, GgmlType::F16, 64, false},    {GgmlType::Q8_0, GgmlType::F16, 128, false},
  };
  // Both follow llama.cpp's CPU flash attention on the same cache bytes with the same query
  // rounding (Q4_1/Q5_1's block-sum term included, kv_quant_device.cuh): only float summation
  // order differs, NMSE ~1e-13. F32/F16 follows the CPU's non-flash path, which rounds the
  // probabilities to F16 (~5e-8). An F16 V under another K is accumulated in float on the GPU,
  // while the CPU's flash attention rounds its F16 V accumulator to F16 at every key (3e-7 to
  // 2e-6, growing with the context): that pair gets the F16-cache bound of test_gpu_cuda_ops.cpp.
  for (const AttnCase& ac : cases) {
    const bool k_plain = ac.k == GgmlType::F16 || ac.k == GgmlType::F32;
    const double bound = ac.v != GgmlType::F16 ? 1e-10 : k_plain ? 1e-6 : 1e-5;
    run_attention_case(b, ac, bound);
  }
}

#else
TEST(GpuKvQuant, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
