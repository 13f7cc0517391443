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
namespace {

using namespace attn;

// Which head dim lane `lane` holds as its m-th value: the general path keeps lane + 32m (the
// layout of warp_hadamard and the query rounding); plain caches give each lane M contiguous dims,
// read with one vector load per row instead of M scalar loads. Scores and the output do not
// depend on the layout, as long as the query, K, V and the partials use the same one.
template <class C, int M>
__device__ __forceinline__ int dim_of(int lane, int m) { return C::kGeneral ? lane + 32 * m : lane * M + m; }

// This lane's M values of head row r of K (is_k) or V, in dim_of's layout.
template <int HD, class C>
__device__ __forceinline__ void load_piece(const C& c, bool is_k, int64_t r, int lane, float (&x)[HD / 32]) {
  constexpr int M = HD / 32;
  if constexpr (C::kGeneral) {
#pragma unroll
    for (int m = 0; m < M; ++m) x[m] = is_k ? c.k(r, lane + 32 * m) : c.v(r, lane + 32 * m);
  } else {
    using T = typename C::Elem;
    const auto piece = *reinterpret_cast<const RowPiece<M, T>*>((is_k ? c.kc : c.vc) + r * HD + lane * M);
#pragma unroll
    for (int m = 0; m < M; ++m) x[m] = load_kv(piece.v, m);
  }
}

// Flash-decoding kernel: grid (n_head_kv, n_tokens, n_split), 4 warps. One block holds the G query
// heads of a GQA group, so each K/V row of the split is read once per KV head (not once per query
// head, as the rows kernel does) and used for all G heads. Warp w takes tiles of kTile consecutive
// keys (begin + (w + 4i)·kTile): the tile's K rows are loaded before any reduction, which keeps
// kTile row reads in flight per warp, then one max update and one rescale per head per tile. The
// block writes each head's partial (max, sum, acc[head_dim]) to the workspace for
// attention_merge_kernel (or, for a rotated V, attention_combine_kernel), which normalises and gates.
constexpr int kTile = 4;
template <int HD, int G, class C>
__global__ void __launch_bounds__(32 * kWarps)
    attention_split_kernel(AttentionArgs a, int n_split, int64_t keys_per_split) {
  FERRY_PDL_WAIT();
  constexpr int M = HD / 32;
  __shared__ float sm_m[kWarps][G], sm_l[kWarps][G];
  __shared__ float sm_acc[kWarps][G][HD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = blockIdx.x, split = blockIdx.z;
  const int64_t t = blockIdx.y;
  const int64_t n_vis = first_position(a) + t + 1;
  const int64_t begin = split * keys_per_split;
  const int64_t end = min(n_vis, begin + keys_per_split);
  const C c(a);

  float q[G][M], acc[G][M], mx[G], l[G];
  MinTerm mt[G];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const float* qh = a.q + t * a.q_ld_token + int64_t{g * G + i} * a.q_ld_head;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      q[i][m] = qh[dim_of<C, M>(lane, m)];
      acc[i][m] = 0.f;
    }
    prepare_query<C>(a, q[i], lane, mt[i]);
    mx[i] = -INFINITY;
    l[i] = 0.f;
  }
  for (int64_t j0 = begin + int64_t{warp} * kTile; j0 < end; j0 += kWarps * kTile) {
    const int nk = static_cast<int>(min(static_cast<int64_t>(kTile), end - j0));  // uniform across the warp
    float s[G][kTile];
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int64_t r = (j0 + min(u, nk - 1)) * a.n_head_kv + g;  // a short tile repeats its last key
      float kv[M];
      load_piece<HD>(c, true, r, lane, kv);
#pragma unroll
      for (int i = 0; i < G; ++i) {
        float d = 0.f;
#pragma unroll
        for (int m = 0; m < M; ++m) d += q[i][m] * kv[m];
        if constexpr (C::kGeneral)
          if (mt[i].on && lane < M) d += mt[i].fix * c.k_min(r, lane);
        s[i][u] = d;
      }
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
      float m_new = mx[i];
#pragma unroll
      for (int u = 0; u < kTile; ++u) {
        s[i][u] = detail::warp_sum(s[i][u]);
        if (u < nk) m_new = fmaxf(m_new, s[i][u]);
      }
      const float corr = expf(mx[i] - m_new);  // exp(−inf) = 0 on the first tile
      l[i] *= corr;
#pragma unroll
      for (int m = 0; m < M; ++m) acc[i][m] *= corr;
#pragma unroll
      for (int u = 0; u < kTile; ++u) {
        s[i][u] = u < nk ? expf(s[i][u] - m_new) : 0.f;
        l[i] += s[i][u];
      }
      mx[i] = m_new;
    }
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      if (u >= nk) break;
      const int64_t r = (j0 + u) * a.n_head_kv + g;
      float vv[M];
      load_piece<HD>(c, false, r, lane, vv);
#pragma unroll
      for (int i = 0; i < G; ++i)
#pragma unroll
        for (int m = 0; m < M; ++m) acc[i][m] += s[i][u] * vv[m];
    }
  }
#pragma unroll
  for (int i = 0; i < G; ++i) {
    if (lane == 0) {
      sm_m[warp][i] = mx[i];
      sm_l[warp][i] = l[i];
    }
#pragma unroll
    for (int m = 0; m < M; ++m) sm_acc[warp][i][dim_of<C, M>(lane, m)] = acc[i][m];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
    const int i = e / HD, d = e % HD;
    float Mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) Mx = fmaxf(Mx, sm_m[w][i]);
    float L = 0.f, o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = rescale(sm_m[w][i], Mx);
      L += sm_l[w][i] * wt;
      o += sm_acc[w][i][d] * wt;
    }
    float* part = static_cast<float*>(a.workspace) + ((t * a.n_head + g * G + i) * n_split + split) * (HD + 2);
    part[2 + d] = o;
    if (d == 0) {
      part[0] = Mx;
      part[1] = L;
    }
  }
}

// The splits the flash-decoding kernel runs with: 0 when it does not apply (a group size without
// an instance, prefill, a context too short to split, a workspace too small for two splits).
int split_plan(const AttentionArgs& a) {
  const int group = a.n_head / a.n_head_kv;
  if (a.n_tokens > kAttentionRowsMaxTokens || (group != 2 && group != 4 && group != 8) || !a.workspace) return 0;
  const size_t per_split = static_cast<size_t>(a.n_tokens) * a.n_head * (a.head_dim + 2) * sizeof(float);
  const int64_t n = std::min<int64_t>(split_count(a.n_tokens, a.n_head_kv, a.p0 + a.n_tokens),
                                      static_cast<int64_t>(a.workspace_bytes / per_split));
  return n >= 2 ? static_cast<int>(n) : 0;
}

template <int HD, int G>
void launch_split(const AttentionArgs& a, dim3 grid, int n_split, int64_t keys_per_split, cudaStream_t stream) {
  switch (cache_kind(a)) {
    case CacheKind::f16:
      launch(attention_split_kernel<HD, G, PlainCache<HD, __half>>, grid, 32 * kWarps, 0, stream, a, n_split, keys_per_split);
      break;
    case CacheKind::f32:
      launch(attention_split_kernel<HD, G, PlainCache<HD, float>>, grid, 32 * kWarps, 0, stream, a, n_split, keys_per_split);
      break;
    case CacheKind::any:
      launch(attention_split_kernel<HD, G, AnyCache<HD>>, grid, 32 * kWarps, 0, stream, a, n_split, keys_per_split);
      break;
  }
}


}  // namespace

bool attention_split_applies(const AttentionArgs& a) { return split_plan(a) > 0; }

void attention_split(const AttentionArgs& a, cudaStream_t stream) {
  const char* op = "attention_split";
  check_args(op, a);
  const int n_split = split_plan(a);
  if (n_split == 0) return attention_rows(a, stream);
  const int64_t n_kv = a.p0 + a.n_tokens;
  const int64_t keys_per_split = (n_kv + n_split - 1) / n_split;
  const int group = a.n_head / a.n_head_kv;
  const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(n_split));
  FERRY_DISPATCH_HEAD_DIM(a.head_dim, op, {
    if (group == 2) launch_split<kHD, 2>(a, grid, n_split, keys_per_split, stream);
    else if (group == 4) launch_split<kHD, 4>(a, grid, n_split, keys_per_split, stream);
    else launch_split<kHD, 8>(a, grid, n_split, keys_per_split, stream);
    FERRY_CUDA_CHECK_LAUNCH("attention_split_kernel");
    launch_reduce<kHD>(a, n_split, stream);
  });
}

}  // namespace ferry::cuda
