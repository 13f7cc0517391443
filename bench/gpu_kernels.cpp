// Per-kernel GPU timings: CUDA events around each call, warm-up, median of repeats, and the bytes
// each kernel must move turned into GB/s next to the card's own device-to-device copy bandwidth
// (measured in the same run) — speed of light, not just microseconds — and each call's cost among
// its neighbours (back to back in a queued burst), the per-kernel cost inside a decode step.
//   bench_gpu_kernels [--quick]
// Prints a markdown table. Without a GPU (or CUDA in the build) it says so and exits 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/cuda_device.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/core/types.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/deltanet.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/ops.cuh"

namespace ferry {
namespace {

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { FERRY_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

// Random bytes with sane fp16 scales in every block, uploaded.
void fill_weights(GgmlType t, void* dst, int64_t rows, int64_t cols, uint32_t seed) {
  const auto info = type_info(t);
  const size_t bytes = row_bytes(t, cols) * rows;
  std::vector<uint8_t> h(bytes);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& b : h) {
    s ^= s << 13; s ^= s >> 17; s ^= s << 5;
    b = static_cast<uint8_t>(s);
  }
  const uint16_t half = fp32_to_fp16(0.01f);
  if (t == GgmlType::F16) {
    for (size_t i = 0; i + 1 < bytes; i += 2) { const uint16_t v = fp32_to_fp16(((h[i] & 0x7f) - 64) / 64.f); std::memcpy(&h[i], &v, 2); }
  } else if (t == GgmlType::BF16) {
    for (size_t i = 0; i + 1 < bytes; i += 2) { const uint16_t v = fp32_to_bf16(((h[i] & 0x7f) - 64) / 64.f); std::memcpy(&h[i], &v, 2); }
  } else if (t == GgmlType::F32) {
    for (size_t i = 0; i + 3 < bytes; i += 4) { const float v = ((h[i] & 0x7f) - 64) / 64.f; std::memcpy(&h[i], &v, 4); }
  } else {
    auto put = [&](size_t at) { std::memcpy(&h[at], &half, 2); };
    for (size_t o = 0; o < bytes; o += info.block_bytes) {
      switch (t) {
        case GgmlType::Q6_K: put(o + 208); break;
        case GgmlType::Q3_K: put(o + 108); break;
        case GgmlType::Q2_K: put(o + 80); put(o + 82); break;
        case GgmlType::MXFP4: h[o] = 120; break;  // E8M0 scale 2^-8
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: put(o); put(o + 2); break;
        default: put(o);  // d first: Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS
      }
    }
  }
  FERRY_CUDA_CHECK(cudaMemcpy(dst, h.data(), bytes, cudaMemcpyHostToDevice));
}

void fill_floats(float* dst, size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> h(n);
  for (auto& v : h) v = u(rng);
  FERRY_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 4, cudaMemcpyHostToDevice));
}

// Median time in µs of `reps` calls, each bracketed by events, after `warm` calls.
// single: median µs of one call, event to event from an idle stream (the host's launch latency
// is inside it for short kernels). stream: the median over bursts of kBurst calls queued at once,
// per call: what a kernel costs among its neighbours in a decode step (small working sets stay in
// L2 across a burst, so bandwidth is taken from `single`).
constexpr int kBurst = 16;
struct Timing {
  double single = 0, stream = 0;
};

double median_of(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Timing time_us(const std::function<void()>& fn, int reps, int warm = 3) {
  cudaEvent_t a, b;
  FERRY_CUDA_CHECK(cudaEventCreate(&a));
  FERRY_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) fn();
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  auto elapsed_us = [&](int calls) {
    FERRY_CUDA_CHECK(cudaEventRecord(a, nullptr));
    for (int c = 0; c < calls; ++c) fn();
    FERRY_CUDA_CHECK(cudaEventRecord(b, nullptr));
    FERRY_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms * 1e3 / calls;
  };
  std::vector<double> single, burst;
  for (int i = 0; i < reps; ++i) single.push_back(elapsed_us(1));
  for (int i = 0; i < std::max(3, reps / 3); ++i) burst.push_back(elapsed_us(kBurst));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return {median_of(single), median_of(burst)};
}

struct Row {
  std::string op, shape;
  Timing us;
  double bytes, flops;
};

void print(const std::vector<Row>& rows, double copy_gbps) {
  std::printf("\n| op | shape | median µs | GB/s | %% of D2D copy BW | TFLOP/s | µs back-to-back (%d queued) |\n"
              "|---|---|---:|---:|---:|---:|---:|\n", kBurst);
  for (const auto& r : rows) {
    const double gbps = r.bytes / (r.us.single * 1e-6) / 1e9;
    std::printf("| %s | %s | %.1f | %.0f | %.0f%% | %s | %.1f |\n", r.op.c_str(), r.shape.c_str(), r.us.single, gbps,
                100.0 * gbps / copy_gbps,
                r.flops > 0 ? std::to_string(r.flops / (r.us.single * 1e-6) / 1e12).substr(0, 5).c_str() : "-",
                r.us.stream);
  }
}

int run(bool quick) {
  cudaDeviceProp prop{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# GPU kernel timings: %s (sm_%d%d, %d SMs, %.0f GiB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  const int reps = quick ? 10 : 30;
  std::vector<Row> rows;

  // Speed of light: device-to-device copy (reads + writes 2 × bytes).
  const size_t copy_bytes = 1ull << 30;
  double copy_gbps = 0;
  {
    DeviceMem a(copy_bytes), b(copy_bytes);
    FERRY_CUDA_CHECK(cudaMemset(a.p, 1, copy_bytes));
    const Timing us = time_us([&] { FERRY_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice, nullptr)); }, 10);
    copy_gbps = 2.0 * copy_bytes / (us.single * 1e-6) / 1e9;
    rows.push_back({"cudaMemcpy D2D (read+write)", "1 GiB", us, 2.0 * copy_bytes, 0});
  }

  // Decode matvec on matrices far larger than L2.
  const int64_t mv_rows = 32768, mv_cols = 8192;
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4}) {
    const size_t wb = row_bytes(t, mv_cols) * mv_rows;
    DeviceMem w(wb), x(mv_cols * 4), y(mv_rows * 4 * 8);
    fill_weights(t, w.p, mv_rows, mv_cols, 1);
    fill_floats(x.as<float>(), mv_cols, 2);
    const Timing us = time_us([&] { cuda::matvec(t, w.p, mv_rows, mv_cols, x.as<float>(), y.as<float>(), nullptr); }, reps);
    rows.push_back({std::string("matvec ") + std::string(type_name(t)), "32768x8192", us, double(wb), 2.0 * mv_rows * mv_cols});
    if (cuda::matvec_q8_supported(t)) {
      // The integer path (opt-in, --cuda-int8-dot): activation quantization + __dp4a dots,
      // both launches timed, as decode would pay them.
      const size_t q8b = cuda::matvec_q8_workspace_bytes(mv_cols);
      DeviceMem ws(q8b);
      const Timing usq = time_us([&] { cuda::matvec_q8(t, w.p, mv_rows, mv_cols, x.as<float>(), y.as<float>(), ws.p, q8b, nullptr); }, reps);
      rows.push_back({std::string("matvec_q8 ") + std::string(type_name(t)), "32768x8192", usq, double(wb), 2.0 * mv_rows * mv_cols});
      if (t == GgmlType::Q8_0) {
        const Timing usx = time_us([&] { cuda::quantize_q8(x.as<float>(), mv_cols, ws.p, q8b, nullptr); }, reps);
        rows.push_back({"quantize_q8 (activations)", "8192", usx, double(mv_cols) * 4 + double(q8b), 0});
      }
    }
    if (t == GgmlType::Q4_K) {
      DeviceMem x8(8 * mv_cols * 4);
      fill_floats(x8.as<float>(), 8 * mv_cols, 3);
      const Timing us8 = time_us([&] { cuda::matmul_direct(t, w.p, mv_rows, mv_cols, x8.as<float>(), mv_cols, 8, y.as<float>(), mv_rows, nullptr); }, reps);
      rows.push_back({"matmul_direct Q4_K", "32768x8192 n=8", us8, double(wb), 16.0 * mv_rows * mv_cols});
    }
  }

  // Prefill GEMM: 4096×4096 Q4_K with 512 tokens: cuBLAS f16 vs the tiled kernel.
  {
    const int64_t r = 4096, c = 4096, n = 512;
    const size_t wb = row_bytes(GgmlType::Q4_K, c) * r;
    DeviceMem w(wb), x(n * c * 4), y(n * r * 4);
    fill_weights(GgmlType::Q4_K, w.p, r, c, 4);
    fill_floats(x.as<float>(), n * c, 5);
    std::string why;
    auto blas = cuda::Blas::try_load(&why);
    if (blas) {
      DeviceMem blas_ws(32 << 20);
      blas->set_workspace(blas_ws.p, 32 << 20);
      const size_t wsb = cuda::matmul_blas_workspace_bytes(GgmlType::Q4_K, r, c, n, cuda::GemmPrecision::f16);
      DeviceMem ws(wsb);
      const Timing us = time_us([&] {
        cuda::matmul_blas(*blas, cuda::GemmPrecision::f16, GgmlType::Q4_K, w.p, r, c, x.as<float>(), c, n, y.as<float>(), r, ws.p, wsb, nullptr);
      }, reps);
      rows.push_back({"matmul_blas f16 Q4_K (dequant+GEMM)", "4096x4096 n=512", us, double(wb), 2.0 * r * c * n});
    } else {
      std::printf("cuBLAS unavailable: %s\n", why.c_str());
    }
    const Timing us = time_us([&] { cuda::matmul_tiled(GgmlType::Q4_K, w.p, r, c, x.as<float>(), c, n, y.as<float>(), r, nullptr); }, quick ? 3 : 10);
    rows.push_back({"matmul_tiled Q4_K", "4096x4096 n=512", us, double(wb), 2.0 * r * c * n});
  }

  // MoE decode step of qwen35moe: 8 experts (2048 → 512 → 2048), gate/up Q4_K, down Q6_K.
  {
    const int64_t embd = 2048, ff = 512;
    const int n_exp = 256, k = 8;
    const size_t gu = row_bytes(GgmlType::Q4_K, embd) * ff, dn = row_bytes(GgmlType::Q6_K, ff) * embd;
    const size_t per = (2 * gu + dn + 255) / 256 * 256;
    DeviceMem pool(per * n_exp), x(embd * 4), h(k * ff * 4), ys(k * embd * 4), y(embd * 4), ids(k * 4), wts(k * 4), table(n_exp * sizeof(cuda::ExpertPtrs));
    std::vector<cuda::ExpertPtrs> tab(n_exp);
    for (int e = 0; e < n_exp; ++e) {
      uint8_t* base = pool.as<uint8_t>() + e * per;
      fill_weights(GgmlType::Q4_K, base, 2 * ff, embd, 10 + e % 7);
      fill_weights(GgmlType::Q6_K, base + 2 * gu, embd, ff, 20 + e % 5);
      tab[e] = {base, base + gu, base + 2 * gu};
    }
    FERRY_CUDA_CHECK(cudaMemcpy(table.p, tab.data(), tab.size() * sizeof(tab[0]), cudaMemcpyHostToDevice));
    const std::vector<int32_t> sel = {3, 250, 17, 99, 128, 64, 200, 5};
    const std::vector<float> w = {0.3f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.05f, 0.05f};
    FERRY_CUDA_CHECK(cudaMemcpy(ids.p, sel.data(), k * 4, cudaMemcpyHostToDevice));
    FERRY_CUDA_CHECK(cudaMemcpy(wts.p, w.data(), k * 4, cudaMemcpyHostToDevice));
    fill_floats(x.as<float>(), embd, 6);
    const auto* tp = table.as<const cuda::ExpertPtrs>();
    const Timing us = time_us([&] {
      cuda::moe_gate_up_swiglu(GgmlType::Q4_K, tp, ids.as<int32_t>(), 1, k, embd, ff, x.as<float>(), h.as<float>(), nullptr);
      cuda::moe_down_slots(GgmlType::Q6_K, tp, ids.as<int32_t>(), 1, k, embd, ff, h.as<float>(), ys.as<float>(), nullptr);
      cuda::moe_sum(ys.as<float>(), wts.as<float>(), 1, k, embd, y.as<float>(), nullptr);
    }, reps);
    rows.push_back({"moe decode (gate/up Q4_K + down Q6_K slots + sum, 3 launches)", "8 of 256 experts, 2048/512", us, double(k) * (2 * gu + dn), 0});

    // A 512-token prompt batch through the same 256 experts, 8 a token spread over all of them:
    // the per-pair kernels (each (token, slot) reads its expert's rows) against the pairs grouped
    // by expert (moe_grouped_sum: tiles of 8 pairs of one expert). The bytes are every expert's
    // matrices once, the least either can read.
    const int64_t nt = 512;
    std::vector<int32_t> pid(nt * k);
    std::vector<float> pw(nt * k);
    for (int64_t t = 0; t < nt; ++t)
      for (int j = 0; j < k; ++j) {
        pid[t * k + j] = static_cast<int32_t>((t * 37 + j * 31 + (t * j) % 5) % n_exp);
        pw[t * k + j] = w[j];
      }
    DeviceMem px(nt * embd * 4), ph(nt * k * ff * 4), pys(nt * k * embd * 4), py(nt * embd * 4), pids(nt * k * 4),
        pwts(nt * k * 4);
    FERRY_CUDA_CHECK(cudaMemcpy(pids.p, pid.data(), pid.size() * 4, cudaMemcpyHostToDevice));
    FERRY_CUDA_CHECK(cudaMemcpy(pwts.p, pw.data(), pw.size() * 4, cudaMemcpyHostToDevice));
    fill_floats(px.as<float>(), nt * embd, 7);
    const size_t gsb = cuda::moe_grouped_scratch_bytes(nt * k, n_exp);
    DeviceMem gs(gsb);
    const double all_bytes = double(n_exp) * (2 * gu + dn);
    const Timing us_pairs = time_us([&] {
      cuda::moe_gate_up_swiglu(GgmlType::Q4_K, tp, pids.as<int32_t>(), nt, k, embd, ff, px.as<float>(), ph.as<float>(), nullptr);
      cuda::moe_down_sum(GgmlType::Q6_K, tp, pids.as<int32_t>(), pwts.as<float>(), nt, k, embd, ff, ph.as<float>(),
                         py.as<float>(), nullptr);
    }, quick ? 3 : 10);
    rows.push_back({"moe prefill per pair (gate/up Q4_K + down Q6_K sum, 2 launches)", "512 tokens x 8 of 256 experts", us_pairs, all_bytes, 0});
    const Timing us_grouped = time_us([&] {
      cuda::moe_grouped_sum(GgmlType::Q4_K, GgmlType::Q6_K, tp, n_exp, pids.as<int32_t>(), pwts.as<float>(), nt, k, embd, ff,
                            px.as<float>(), ph.as<float>(), pys.as<float>(), py.as<float>(), gs.p, gsb, nullptr);
    }, quick ? 3 : 10);
    rows.push_back({"moe prefill grouped by expert (sort + 2 tile launches + sum)", "512 tokens x 8 of 256 experts", us_grouped, all_bytes, 0});
  }

  // Attention decode at 4K, 32K and 128K keys, qwen35 full-attention shape (16/2 heads, d=256,
  // gated): F16 cache (the plain kernels) and quantized caches (the general kernel, rotated as
  // CudaOps rotates them: K by 256, V by 64), through cuda::attention (the staged flash-decoding,
  // every cache type where it applies); at F16 and Q8_0 beside it the register split
  // (cuda::attention_split, the decode path before the staged kernel), at F16 the rows kernel
  // (before the split); the qwen3moe shape (32/4 heads, d=128) at F16 through both splits.
  enum class AttnPath { dispatch, split, rows };
  struct AttnCase { GgmlType t; int64_t n_kv; AttnPath path; int n_head, n_kv_head, hd; };
  std::vector<AttnCase> attn_cases;
  const int64_t kContexts[] = {4096, 32768, 131072};
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0})
    for (int64_t n : kContexts) attn_cases.push_back({t, n, AttnPath::dispatch, 16, 2, 256});
  for (AttnPath p : {AttnPath::split, AttnPath::rows})
    for (int64_t n : kContexts) attn_cases.push_back({GgmlType::F16, n, p, 16, 2, 256});
  for (int64_t n : kContexts) attn_cases.push_back({GgmlType::Q8_0, n, AttnPath::split, 16, 2, 256});
  for (AttnPath p : {AttnPath::dispatch, AttnPath::split})
    for (int64_t n : kContexts) attn_cases.push_back({GgmlType::F16, n, p, 32, 4, 128});
  for (const auto& [kvt, n_kv, path, n_head, n_kv_head, hd] : attn_cases) {
    const size_t cache_bytes = static_cast<size_t>(n_kv) * n_kv_head * row_bytes(kvt, hd);
    DeviceMem q(n_head * 2 * hd * 4), kc(cache_bytes), vc(cache_bytes), out(n_head * hd * 4);
    FERRY_CUDA_CHECK(cudaMemset(kc.p, 0x11, cache_bytes));
    FERRY_CUDA_CHECK(cudaMemset(vc.p, 0x22, cache_bytes));
    fill_floats(q.as<float>(), n_head * 2 * hd, 7);
    const size_t wsb = cuda::attention_workspace_bytes(1, n_head, hd, n_kv);
    DeviceMem ws(wsb);
    cuda::AttentionArgs a;
    a.q = q.as<float>();
    a.q_ld_head = 2 * hd;
    a.q_ld_token = n_head * 2 * hd;
    a.gate = q.as<float>() + hd;
    a.gate_ld_head = 2 * hd;
    a.gate_ld_token = n_head * 2 * hd;
    a.k_cache = kc.p;
    a.v_cache = vc.p;
    a.k_type = a.v_type = kvt;
    if (kvt != GgmlType::F16) {
      a.n_rot_k = 256;
      a.n_rot_v = 64;
      a.rot_scale_k = 1.f / 16;
      a.rot_scale_v = 1.f / 8;
    }
    a.out = out.as<float>();
    a.out_ld_token = n_head * hd;
    a.n_tokens = 1;
    a.p0 = n_kv - 1;
    a.n_head = n_head;
    a.n_head_kv = n_kv_head;
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    a.workspace = ws.p;
    a.workspace_bytes = wsb;
    const AttnPath run_path = path;  // a plain copy for the lambda
    const Timing us = time_us([&] {
      if (run_path == AttnPath::rows) cuda::attention_rows(a, nullptr);
      else if (run_path == AttnPath::split) cuda::attention_split(a, nullptr);
      else cuda::attention(a, nullptr);
    }, reps);
    const std::string heads = " (" + std::to_string(n_head) + "/" + std::to_string(n_kv_head) + " heads, d=" + std::to_string(hd) + ", gated)";
    const char* what = path == AttnPath::rows    ? "attention decode, rows kernel "
                       : path == AttnPath::split ? "attention decode, register split "
                       : cuda::attention_staged_applies(a) ? "attention decode, staged "
                                                            : "attention decode ";
    rows.push_back({std::string(what) + std::string(type_name(kvt)) + heads, "ctx " + std::to_string(n_kv), us,
                    2.0 * static_cast<double>(cache_bytes), 0});
  }

  // Gated DeltaNet: decode step (32 heads × 128×128 state read and written) and a 512-token
  // prefill call (state stays in registers; bytes = the inputs and outputs of all tokens).
  {
    const int hk = 16, hv = 32, S = 128;
    const int64_t T = 512;
    DeviceMem q(T * hk * S * 4), k(T * hk * S * 4), v(T * hv * S * 4), g(T * hv * 4), b(T * hv * 4),
        st(hv * S * S * 4), o(T * hv * S * 4);
    fill_floats(q.as<float>(), T * hk * S, 8, -0.1f, 0.1f);
    fill_floats(k.as<float>(), T * hk * S, 9, -0.1f, 0.1f);
    fill_floats(v.as<float>(), T * hv * S, 10);
    fill_floats(g.as<float>(), T * hv, 11, -0.5f, -0.1f);
    fill_floats(b.as<float>(), T * hv, 12, 0.1f, 0.9f);
    fill_floats(st.as<float>(), hv * S * S, 13, -0.1f, 0.1f);
    cuda::GdnArgs a;
    a.n_k_heads = hk;
    a.n_v_heads = hv;
    a.head_dim = S;
    a.q = q.as<float>(); a.ldq = hk * S;
    a.k = k.as<float>(); a.ldk = hk * S;
    a.v = v.as<float>(); a.ldv = hv * S;
    a.g = g.as<float>(); a.beta = b.as<float>();
    a.state = st.as<float>();
    a.out = o.as<float>(); a.ldo = hv * S;
    a.scale = 1.f / std::sqrt(128.f);
    a.n_tokens = 1;
    const Timing us = time_us([&] { cuda::gdn_delta_rule(a, nullptr); }, reps);
    rows.push_back({"gdn_delta_rule decode", "32 heads, S=128", us, 2.0 * hv * S * S * 4, 0});
    a.n_tokens = T;
    const Timing us_p = time_us([&] { cuda::gdn_delta_rule(a, nullptr); }, quick ? 3 : 10);
    rows.push_back({"gdn_delta_rule prefill", "512 tokens, 32 heads", us_p, T * (2.0 * hk + 2.0 * hv) * S * 4, 4.0 * T * hv * S * S});
    // The chunked form at the same size (CudaGdnOps takes it from cuda::kGdnChunkedMinTokens
    // tokens, a threshold these two rows should set). Bytes: inputs and outputs only, not the
    // scratch; flops: the recurrence's, for comparison.
    DeviceMem scratch(cuda::gdn_chunked_scratch_bytes(a));
    const Timing us_c = time_us([&] { cuda::gdn_delta_rule_chunked(a, scratch.as<float>(), nullptr); }, quick ? 3 : 10);
    rows.push_back({"gdn_delta_rule_chunked prefill", "512 tokens, 32 heads", us_c, T * (2.0 * hk + 2.0 * hv) * S * 4,
                    4.0 * T * hv * S * S});
  }

  // Small ops: launch-bound on decode.
  {
    DeviceMem x(2048 * 4), w(2048 * 4), lg(256 * 4), ids(8 * 4), wt(8 * 4);
    fill_floats(x.as<float>(), 2048, 14);
    fill_floats(w.as<float>(), 2048, 15);
    fill_floats(lg.as<float>(), 256, 16);
    const Timing us_norm = time_us([&] { cuda::rmsnorm(x.as<float>(), 2048, w.as<float>(), x.as<float>(), 2048, 1, 2048, 1e-6f, nullptr); }, reps);
    rows.push_back({"rmsnorm", "1x2048", us_norm, 3.0 * 2048 * 4, 0});
    const Timing us_route = time_us([&] { cuda::route_topk(lg.as<float>(), 1, 256, 8, ids.as<int32_t>(), wt.as<float>(), true, 1.f, nullptr); }, reps);
    rows.push_back({"route_topk", "256 experts, k=8", us_route, 256 * 4, 0});
  }
  print(rows, copy_gbps);
  std::printf("\n(GB/s counts the bytes a kernel must move: weights for matvec/MoE, K+V for attention, state read+write for DeltaNet.)\n");
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (ferry::cuda_device_count() == 0) {
    std::printf("bench_gpu_kernels: no CUDA device; nothing measured\n");
    return 0;
  }
  try {
    return ferry::run(quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_kernels: %s\n", e.what());
    return 1;
  }
}

#else
int main() {
  std::printf("bench_gpu_kernels: built without CUDA; nothing measured\n");
  return 0;
}
#endif
