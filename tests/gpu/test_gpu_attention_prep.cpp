// Ops::attention_prep on CUDA (kernels/cuda/attention_prep.cu: the q/k norms, RoPE and the K/V
// store of an attention block in one launch) on random data, for every KV cache type, both q
// layouts (qwen35moe's [q | gate] rows at stride 2·head_dim, qwen3moe's contiguous heads), a
// prefill batch of 3 and a decode step at pos0 > 0, partial and full RoPE:
//  - bit for bit against the unfused CUDA sequence it replaces (the base class's Ops:: composition
//    on the same CudaOps): q, k and the bytes of both caches;
//  - against CpuOps (the defining sequence in ggml's order) within the rmsnorm/rope bounds of
//    test_gpu_cuda_ops.cpp for q and k, and the cache bytes equal to the CPU's store of the same
//    k and v (kv_store is exact on both backends: test_gpu_kv_quant.cpp);
//  - in the launches it promises (1 against 6).
// A head of zeros (token 0, last KV head) makes IQ4_NL carry levels across heads of a token row.
// Added CI time: 11 type pairs × 4 layouts × 2 steps of small tensors, ~0.2 s on the emulator.
#include "tests/gpu/gpu_test_util.hpp"

#include <cstring>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "tests/gpu/backend_pair.hpp"

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

constexpr GgmlType kKvTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,  GgmlType::Q4_0,
                                 GgmlType::Q4_1, GgmlType::IQ4_NL, GgmlType::Q5_0, GgmlType::Q5_1};

// The rmsnorm and rope_neox bounds of CudaOps against CpuOps (test_gpu_cuda_ops.cpp): float
// reductions and the device's sincosf/powf against the CPU's.
constexpr double kQkBound = 1e-10;

struct Layout {
  const char* name;
  int32_t n_head, n_kv, head_dim, n_rot;
  bool gated;  // q rows of [q | gate] per head
  float freq_base;
};
constexpr Layout kLayouts[] = {
    {"q+gate 4/2h d=256 rot 64", 4, 2, 256, 64, true, 1e7f},  // qwen35moe's full attention
    {"8/4h d=128 rot 128", 8, 4, 128, 128, false, 1e6f},        // qwen3moe
    {"6/1h d=64 rot 32", 6, 1, 64, 32, false, 1e4f},          // q rows not a multiple of a block's 4 warps
    {"8/8h d=64 rot 64", 8, 8, 64, 64, false, 1e4f},          // more KV heads than a block has warps
};

// A layer's cache of n_ctx positions in host memory, starting as the same garbage everywhere.
struct HostCache {
  std::vector<uint8_t> k, v;
  KvLayerView view;
  HostCache(GgmlType tk, GgmlType tv, int64_t n_ctx, int32_t n_kv, int32_t hd) {
    view = KvLayerView{nullptr, nullptr, tk, tv, n_ctx, n_kv, hd, hd};
    k.assign(static_cast<size_t>(n_ctx) * n_kv * view.k_head_bytes(), 0xA5);
    v.assign(static_cast<size_t>(n_ctx) * n_kv * view.v_head_bytes(), 0x5A);
    view.k = k.data();
    view.v = v.data();
  }
};

// The same on the device.
struct DevCache {
  DeviceBuffer k, v;
  KvLayerView view;
  DevCache(Backends& b, const HostCache& h) : k(b.up(h.k)), v(b.up(h.v)), view(h.view) {
    view.k = k.data();
    view.v = v.data();
  }
};

std::vector<float> kv_values(int64_t n, uint32_t seed) {
  auto v = random_floats(static_cast<size_t>(n), seed, -1.f, 1.f);
  for (int64_t i = 0; i < n; i += 37) v[static_cast<size_t>(i)] *= 8.f;  // outliers, as after RoPE
  return v;
}

void check_case(Backends& b, const Layout& L, GgmlType tk, GgmlType tv) {
  const int32_t hd = L.head_dim;
  const int64_t n_ctx = 12, q_head_stride = L.gated ? 2 * hd : hd;
  const std::string what = std::string(L.name) + " " + std::string(type_name(tk)) + "/" + std::string(type_name(tv));
  const auto q_norm = random_floats(hd, 41, 0.5f, 1.5f), k_norm = random_floats(hd, 42, 0.5f, 1.5f);
  auto dq_norm = b.up(q_norm), dk_norm = b.up(k_norm);
  HostCache cpu(tk, tv, n_ctx, L.n_kv, hd), store_of_gpu_k(tk, tv, n_ctx, L.n_kv, hd);
  DevCache gpu[2] = {DevCache(b, cpu), DevCache(b, cpu)};  // [fused, unfused]
  int64_t pos0 = 5;
  for (int64_t n : {3, 1}) {  // a prefill batch, then a decode step after it
    const std::string shape = what + " p0=" + std::to_string(pos0) + " n=" + std::to_string(n);
    const auto seed = static_cast<uint32_t>(pos0 * 7 + static_cast<int64_t>(tk) * 131 + static_cast<int64_t>(tv));
    const auto q = random_floats(n * L.n_head * q_head_stride, seed + 1, -2.f, 2.f);
    auto k = kv_values(n * L.n_kv * hd, seed + 2), v = kv_values(n * L.n_kv * hd, seed + 3);
    if (n > 1 && L.n_kv > 1)
      for (int32_t i = 0; i < hd; ++i) k[(L.n_kv - 1) * hd + i] = v[(L.n_kv - 1) * hd + i] = 0.f;
    std::vector<int32_t> pos(n);
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(pos0 + t);

    std::vector<float> cq = q, ck = k;
    const AttentionPrep on_cpu{.q = cq.data(), .q_head_stride = q_head_stride, .n_head = L.n_head, .k = ck.data(),
                               .v = v.data(), .q_norm = q_norm.data(), .k_norm = k_norm.data(), .eps = 1e-6f,
                               .n_rot = L.n_rot, .pos = pos.data(), .freq_base = L.freq_base, .kv = cpu.view,
                               .pos0 = pos0, .n_tokens = n};
    b.cpu.attention_prep(on_cpu);

    std::vector<float> got_q[2], got_k[2];
    auto dpos = b.up(pos), dv = b.up(v);
    for (int unfused = 0; unfused < 2; ++unfused) {
      auto dq = b.up(q), dk = b.up(k);
      AttentionPrep p = on_cpu;
      p.q = dq.f32();
      p.k = dk.f32();
      p.v = dv.f32();
      p.q_norm = dq_norm.f32();
      p.k_norm = dk_norm.f32();
      p.pos = dpos.i32();
      p.kv = gpu[unfused].view;
      b.gpu->sync();
      const uint64_t k0 = cuda_kernels_launched();
      if (unfused) b.gpu->Ops::attention_prep(p);
      else b.gpu->attention_prep(p);
      b.gpu->sync();
      EXPECT_EQ(cuda_kernels_launched() - k0, unfused ? 6u : 1u) << shape;
      got_q[unfused] = b.down<float>(dq, q.size());
      got_k[unfused] = b.down<float>(dk, k.size());
    }
    report("CudaOps::attention_prep q vs CpuOps", shape, nmse(cq, got_q[0]), kQkBound);
    report("CudaOps::attention_prep k vs CpuOps", shape, nmse(ck, got_k[0]), kQkBound);
    report_exact("CudaOps::attention_prep q vs the unfused CUDA ops", shape,
                 std::memcmp(got_q[0].data(), got_q[1].data(), q.size() * sizeof(float)) == 0);
    report_exact("CudaOps::attention_prep k vs the unfused CUDA ops", shape,
                 std::memcmp(got_k[0].data(), got_k[1].data(), k.size() * sizeof(float)) == 0);
    b.cpu.kv_store(store_of_gpu_k.view, pos0, n, got_k[0].data(), v.data());
    pos0 += n;
  }
  const auto kf = b.down<uint8_t>(gpu[0].k, cpu.k.size()), vf = b.down<uint8_t>(gpu[0].v, cpu.v.size());
  report_exact("CudaOps::attention_prep K cache vs the unfused CUDA ops", what,
               kf == b.down<uint8_t>(gpu[1].k, cpu.k.size()));
  report_exact("CudaOps::attention_prep V cache vs the unfused CUDA ops", what,
               vf == b.down<uint8_t>(gpu[1].v, cpu.v.size()));
  report_bytes("CudaOps::attention_prep K cache vs CpuOps::kv_store of its k", what, store_of_gpu_k.k, kf,
               static_cast<size_t>(row_bytes(tk, type_info(tk).block_values)));
  report_bytes("CudaOps::attention_prep V cache vs CpuOps", what, cpu.v, vf,
               static_cast<size_t>(row_bytes(tv, type_info(tv).block_values)));
}

TEST(GpuAttentionPrep, FusedEqualsTheUnfusedOpsForEveryKvType) {
  FERRY_REQUIRE_GPU();
  Backends b;
  for (const Layout& L : kLayouts) {
    for (GgmlType t : kKvTypes) check_case(b, L, t, t);
    // K and V of different types stage rows of different sizes (or none) in shared memory.
    check_case(b, L, GgmlType::Q8_0, GgmlType::IQ4_NL);
    check_case(b, L, GgmlType::F16, GgmlType::Q4_0);
  }
}

TEST(GpuAttentionPrep, RefusesBadCaches) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int32_t n_head = 2, n_kv = 1, hd = 64;
  std::vector<float> zeros(n_head * hd, 0.f);
  auto dq = b.up(zeros), dk = b.up(zeros), dv = b.up(zeros), dw = b.up(random_floats(hd, 1));
  auto dpos = b.up(std::vector<int32_t>{3});
  HostCache h(GgmlType::F16, GgmlType::F16, 4, n_kv, hd);
  DevCache c(b, h);
  AttentionPrep p{.q = dq.f32(), .q_head_stride = hd, .n_head = n_head, .k = dk.f32(), .v = dv.f32(),
                  .q_norm = dw.f32(), .k_norm = dw.f32(), .eps = 1e-6f, .n_rot = hd, .pos = dpos.i32(),
                  .freq_base = 1e4f, .kv = c.view, .pos0 = 4, .n_tokens = 1};
  try {
    b.gpu->attention_prep(p);
    ADD_FAILURE() << "a row past the cache was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::context) << e.what();
  }
  p.pos0 = 3;
  p.kv.type_k = GgmlType::Q4_K;
  try {
    b.gpu->attention_prep(p);
    ADD_FAILURE() << "a Q4_K cache was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
  }
}

#else
TEST(GpuAttentionPrep, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
