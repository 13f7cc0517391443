#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kv_quant_device.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace attn {

void check_args(const char* op, const AttentionArgs& a) {
  require(a.q && a.k_cache && a.v_cache && a.out, op, "null q, k_cache, v_cache or out");
  require(a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0, op,
          "n_head (" + std::to_string(a.n_head) + ") must be a multiple of n_head_kv (" +
              std::to_string(a.n_head_kv) + ")");
  require(a.n_tokens >= 1 && a.n_tokens <= 65535 && a.p0 >= 0, op, "n_tokens must be in [1, 65535], p0 ≥ 0");
  require(a.n_head <= 65535, op, "too many heads");
  require(!a.p0_dev || a.n_tokens <= kAttentionRowsMaxTokens, op,
          "a position read from device memory (p0_dev) is for decode batches of up to 4 tokens");
  for (GgmlType t : {a.k_type, a.v_type})
    require(detail::kv_head_bytes(t, 32) > 0, op,
            "KV cache type id " + std::to_string(static_cast<unsigned>(t)) +
                " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)");
  require(a.n_rot_k >= 0 && a.n_rot_v >= 0 && a.n_rot_k % 64 == 0 && a.n_rot_v % 64 == 0 &&
              (a.n_rot_k == 0 || a.head_dim % a.n_rot_k == 0) && (a.n_rot_v == 0 || a.head_dim % a.n_rot_v == 0),
          op, "rotation sizes must be 0 or multiples of 64 dividing head_dim");
  require(cache_kind(a) == CacheKind::any || (a.n_rot_k == 0 && a.n_rot_v == 0), op,
          "F16/F32 caches are not rotated (n_rot_k, n_rot_v must be 0)");
  require(a.out_ld_token >= int64_t{a.n_head} * a.head_dim, op, "out_ld_token too small");
  require(a.q_ld_head >= a.head_dim && a.q_ld_token >= int64_t{a.n_head} * a.q_ld_head, op, "bad q strides");
  if (a.gate) require(a.gate_ld_head >= a.head_dim && a.gate_ld_token >= int64_t{a.n_head} * a.gate_ld_head, op, "bad gate strides");
}


}  // namespace attn

namespace {

using namespace attn;

constexpr int kTileQ = 16;   // queries per tiled block (4 per warp)
constexpr int kTileKV = 16;  // keys per shared-memory tile
// Decode is latency-bound (one warp walks its keys one after another), so long contexts are split
// finely: ≥ 128 keys per block, up to 128 blocks per (token, head), merged by a second kernel.
constexpr int kKeysPerSplit = 128;
constexpr int kMaxSplits = 128;

// Rows kernel: grid (n_head, n_tokens, n_split), 4 warps. Warp w walks keys begin+w, begin+w+4,
// ...: one key per step, lanes over head dims (coalesced K/V row reads), a warp-sum per score,
// online softmax. The 4 warp states are merged in shared memory; with n_split > 1 the block
// writes its (max, sum, acc[head_dim]) partial to the workspace for attention_combine_kernel.
template <int HD, class C>
__global__ void __launch_bounds__(32 * kWarps)
    attention_rows_kernel(AttentionArgs a, int n_split, int64_t keys_per_split) {
  FERRY_PDL_WAIT();
  constexpr int M = HD / 32;
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][HD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.x, split = blockIdx.z;
  const int64_t t = blockIdx.y;
  const int g = h / (a.n_head / a.n_head_kv);
  const int64_t n_vis = first_position(a) + t + 1;
  const int64_t begin = split * keys_per_split;
  const int64_t end = min(n_vis, begin + keys_per_split);
  const C c(a);

  float q[M], acc[M];
  const float* qh = a.q + t * a.q_ld_token + int64_t{h} * a.q_ld_head;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    q[m] = qh[lane + 32 * m];
    acc[m] = 0.f;
  }
  MinTerm mt;
  prepare_query<C>(a, q, lane, mt);
  float mx = -INFINITY, l = 0.f;
  // Two keys per step: their loads and warp reductions are independent, which keeps twice as many
  // memory requests in flight per warp.
  int64_t j = begin + warp;
  for (; j + kWarps < end; j += 2 * kWarps) {
    const int64_t r0 = j * a.n_head_kv + g, r1 = (j + kWarps) * a.n_head_kv + g;
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      s0 += q[m] * c.k(r0, lane + 32 * m);
      s1 += q[m] * c.k(r1, lane + 32 * m);
    }
    if constexpr (C::kGeneral)
      if (mt.on && lane < M) {
        s0 += mt.fix * c.k_min(r0, lane);
        s1 += mt.fix * c.k_min(r1, lane);
      }
    s0 = detail::warp_sum(s0);
    s1 = detail::warp_sum(s1);
    const float m_new = fmaxf(mx, fmaxf(s0, s1));
    const float corr = expf(mx - m_new);
    const float p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
    l = l * corr + p0 + p1;
#pragma unroll
    for (int m = 0; m < M; ++m)
      acc[m] = acc[m] * corr + p0 * c.v(r0, lane + 32 * m) + p1 * c.v(r1, lane + 32 * m);
    mx = m_new;
  }
  if (j < end) {
    const int64_t r = j * a.n_head_kv + g;
    float s = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) s += q[m] * c.k(r, lane + 32 * m);
    if constexpr (C::kGeneral)
      if (mt.on && lane < M) s += mt.fix * c.k_min(r, lane);
    s = detail::warp_sum(s);
    const float m_new = fmaxf(mx, s);
    const float corr = expf(mx - m_new);  // exp(−inf) = 0 on the first key
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = acc[m] * corr + p * c.v(r, lane + 32 * m);
    mx = m_new;
  }
  if (lane == 0) {
    sm_m[warp] = mx;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int m = 0; m < M; ++m) sm_acc[warp][lane + 32 * m] = acc[m];
  __syncthreads();
  float Mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) Mx = fmaxf(Mx, sm_m[w]);
  float L = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) L += sm_l[w] * rescale(sm_m[w], Mx);
  // A rotated V cache: the normalised row goes through sm_acc[0] to warp 0, which rotates it back.
  const bool rotate_out = C::kGeneral && a.n_rot_v > 0 && n_split == 1;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += sm_acc[w][d] * rescale(sm_m[w], Mx);
    if (n_split == 1) {
      o /= L;
      if (rotate_out) {
        sm_acc[0][d] = o;  // column d is this thread's alone
        continue;
      }
      if (a.gate) o *= sigmoidf_(a.gate[t * a.gate_ld_token + int64_t{h} * a.gate_ld_head + d]);
      a.out[t * a.out_ld_token + int64_t{h} * HD + d] = o;
    } else {
      float* part = static_cast<float*>(a.workspace) + ((t * a.n_head + h) * n_split + split) * (HD + 2);
      part[2 + d] = o;
      if (d == 0) {
        part[0] = Mx;
        part[1] = L;
      }
    }
  }
  if (rotate_out) {
    __syncthreads();
    if (warp == 0) {
      float o[M];
#pragma unroll
      for (int m = 0; m < M; ++m) o[m] = sm_acc[0][lane + 32 * m];
      store_rotated_out<HD>(a, o, t, h, lane);
    }
  }
}


// Tiled kernel: grid (n_head, ⌈n_tokens/16⌉), 4 warps × 4 queries. Each K/V tile of 16 keys is
// converted to float in shared memory once and used by all 16 queries of the block.
template <int HD, class C>
__global__ void __launch_bounds__(32 * kWarps) attention_tiled_kernel(AttentionArgs a) {
  FERRY_PDL_WAIT();
  constexpr int M = HD / 32;
  constexpr int QW = kTileQ / kWarps;
  __shared__ float Ks[kTileKV][HD];
  __shared__ float Vs[kTileKV][HD];
  __shared__ float Kmin[C::kGeneral ? kTileKV : 1][M];  // Q4_1/Q5_1 K: the tile's block mins
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.x;
  const int g = h / (a.n_head / a.n_head_kv);
  const int64_t t0 = int64_t{blockIdx.y} * kTileQ;
  const int64_t t_last = min(t0 + kTileQ, a.n_tokens) - 1;
  const int64_t key_last = a.p0 + t_last;  // last key any query of the block sees
  const C c(a);

  float q[QW][M], acc[QW][M], mx[QW], l[QW];
  MinTerm mt[QW];
#pragma unroll
  for (int i = 0; i < QW; ++i) {
    const int64_t t = t0 + warp * QW + i;
    const float* qh = a.q + min(t, a.n_tokens - 1) * a.q_ld_token + int64_t{h} * a.q_ld_head;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      q[i][m] = qh[lane + 32 * m];
      acc[i][m] = 0.f;
    }
    prepare_query<C>(a, q[i], lane, mt[i]);
    mx[i] = -INFINITY;
    l[i] = 0.f;
  }
  for (int64_t kb = 0; kb <= key_last; kb += kTileKV) {
    for (int e = threadIdx.x; e < kTileKV * HD; e += blockDim.x) {
      const int jj = e / HD, d = e % HD;
      const int64_t j = kb + jj;
      const int64_t r = j * a.n_head_kv + g;
      Ks[jj][d] = j <= key_last ? c.k(r, d) : 0.f;
      Vs[jj][d] = j <= key_last ? c.v(r, d) : 0.f;
    }
    if constexpr (C::kGeneral)
      if (mt[0].on)
        for (int e = threadIdx.x; e < kTileKV * M; e += blockDim.x) {
          const int64_t j = kb + e / M;
          Kmin[e / M][e % M] = j <= key_last ? c.k_min(j * a.n_head_kv + g, e % M) : 0.f;
        }
    __syncthreads();
    for (int jj = 0; jj < kTileKV; ++jj) {
      const int64_t j = kb + jj;
#pragma unroll
      for (int i = 0; i < QW; ++i) {
        const int64_t t = t0 + warp * QW + i;
        if (t >= a.n_tokens || j > a.p0 + t) continue;  // uniform across the warp
        float s = 0.f;
#pragma unroll
        for (int m = 0; m < M; ++m) s += q[i][m] * Ks[jj][lane + 32 * m];
        if constexpr (C::kGeneral)
          if (mt[i].on && lane < M) s += mt[i].fix * Kmin[jj][lane];
        s = detail::warp_sum(s);
        const float m_new = fmaxf(mx[i], s);
        const float corr = expf(mx[i] - m_new);
        const float p = expf(s - m_new);
        l[i] = l[i] * corr + p;
#pragma unroll
        for (int m = 0; m < M; ++m) acc[i][m] = acc[i][m] * corr + p * Vs[jj][lane + 32 * m];
        mx[i] = m_new;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < QW; ++i) {
    const int64_t t = t0 + warp * QW + i;
    if (t >= a.n_tokens) continue;  // uniform across the warp
    if (C::kGeneral && a.n_rot_v > 0) {
      float o[M];
#pragma unroll
      for (int m = 0; m < M; ++m) o[m] = acc[i][m] / l[i];
      store_rotated_out<HD>(a, o, t, h, lane);
      continue;
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int d = lane + 32 * m;
      float o = acc[i][m] / l[i];
      if (a.gate) o *= sigmoidf_(a.gate[t * a.gate_ld_token + int64_t{h} * a.gate_ld_head + d]);
      a.out[t * a.out_ld_token + int64_t{h} * HD + d] = o;
    }
  }
}

int choose_splits(const AttentionArgs& a) {
  const int64_t n_kv = a.p0 + a.n_tokens;
  int n_split = static_cast<int>(std::min<int64_t>((n_kv + kKeysPerSplit - 1) / kKeysPerSplit, kMaxSplits));
  if (n_split > 1 && (!a.workspace || a.workspace_bytes < attention_workspace_bytes(a.n_tokens, a.n_head, a.head_dim, n_kv)))
    n_split = 1;
  return std::max(n_split, 1);
}

}  // namespace

int64_t attention_plan_keys(int64_t n_kv, int64_t n_ctx) {
  int64_t keys = 256;
  if (n_kv > keys) {
    int64_t step = 32;  // eighths of the octave [256, 512) and up
    while (keys + 7 * step < n_kv) {
      keys *= 2;
      step *= 2;
    }
    while (keys < n_kv) keys += step;
  }
  return std::max(n_kv, std::min(keys, n_ctx));
}

size_t attention_workspace_bytes(int64_t n_tokens, int n_head, int head_dim, int64_t n_kv) {
  // The larger of the rows kernel's split and the flash-decoding split at one KV head (its most).
  const int64_t n_split = std::max(std::min<int64_t>((n_kv + kKeysPerSplit - 1) / kKeysPerSplit, kMaxSplits),
                                   split_count(n_tokens, 1, n_kv));
  return static_cast<size_t>(n_tokens) * n_head * n_split * (head_dim + 2) * sizeof(float);
}

void attention_rows(const AttentionArgs& a, cudaStream_t stream) {
  const char* op = "attention_rows";
  check_args(op, a);
  const int n_split = choose_splits(a);
  const int64_t n_kv = a.p0 + a.n_tokens;
  const int64_t keys_per_split = (n_kv + n_split - 1) / n_split;
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(n_split));
  FERRY_DISPATCH_HEAD_DIM(a.head_dim, op, {
    switch (cache_kind(a)) {
      case CacheKind::f16:
        launch(attention_rows_kernel<kHD, PlainCache<kHD, __half>>, grid, 32 * kWarps, 0, stream, a, n_split, keys_per_split);
        break;
      case CacheKind::f32:
        launch(attention_rows_kernel<kHD, PlainCache<kHD, float>>, grid, 32 * kWarps, 0, stream, a, n_split, keys_per_split);
        break;
      case CacheKind::any:
        launch(attention_rows_kernel<kHD, AnyCache<kHD>>, grid, 32 * kWarps, 0, stream, a, n_split, keys_per_split);
        break;
    }
    FERRY_CUDA_CHECK_LAUNCH("attention_rows_kernel");
    if (n_split > 1) launch_combine<kHD>(a, n_split, stream);
  });
}

void attention_tiled(const AttentionArgs& a, cudaStream_t stream) {
  const char* op = "attention_tiled";
  check_args(op, a);
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>((a.n_tokens + kTileQ - 1) / kTileQ));
  FERRY_DISPATCH_HEAD_DIM(a.head_dim, op, {
    switch (cache_kind(a)) {
      case CacheKind::f16: launch(attention_tiled_kernel<kHD, PlainCache<kHD, __half>>, grid, 32 * kWarps, 0, stream, a); break;
      case CacheKind::f32: launch(attention_tiled_kernel<kHD, PlainCache<kHD, float>>, grid, 32 * kWarps, 0, stream, a); break;
      case CacheKind::any: launch(attention_tiled_kernel<kHD, AnyCache<kHD>>, grid, 32 * kWarps, 0, stream, a); break;
    }
    FERRY_CUDA_CHECK_LAUNCH("attention_tiled_kernel");
  });
}

void attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.n_tokens > kAttentionRowsMaxTokens) attention_tiled(a, stream);
  else attention_staged(a, stream);  // the register split, or the rows kernel, where it does not apply
}

}  // namespace ferry::cuda