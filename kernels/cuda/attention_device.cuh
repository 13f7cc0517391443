#pragma once
// Device helpers shared by the attention kernels (attention.cu: rows and tiled kernels;
// attention_split.cu: flash-decoding): how a kernel reads each cache type, the query preparation of
// the general (quantized) path, the partial-state merge and the combine kernel, the host-side
// dispatch over cache types and head sizes. Included only by those two files.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kv_quant_device.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda::attn {

constexpr int kWarps = 4;  // warps per block of the rows, split and tiled kernels

template <typename KV>
__device__ __forceinline__ float load_kv(const KV* p, int64_t i) {
  if constexpr (sizeof(KV) == 2) return __half2float(p[i]);
  else return p[i];
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

// The first new token's position: read from device memory when the launch was planned ahead of it
// (AttentionArgs::p0_dev), else the argument.
__device__ __forceinline__ int64_t first_position(const AttentionArgs& a) {
  return a.p0_dev ? int64_t{*a.p0_dev} : a.p0;
}

// How a kernel reads the cache: value d of head row r (= key·n_head_kv + kv head) of K or V.
// PlainCache: F16/F16 or F32/F32, element loads (the fast path, unchanged by the quantized one).
template <int HD, typename T>
struct PlainCache {
  static constexpr bool kGeneral = false;
  using Elem = T;
  const T* kc;
  const T* vc;
  __device__ explicit PlainCache(const AttentionArgs& a)
      : kc(static_cast<const T*>(a.k_cache)), vc(static_cast<const T*>(a.v_cache)) {}
  __device__ float k(int64_t r, int d) const { return load_kv(kc, r * HD + d); }
  __device__ float v(int64_t r, int d) const { return load_kv(vc, r * HD + d); }
};
// AnyCache: any K type with any V type, decoded value by value (kv_quant_device.cuh); the kernels
// also rotate and round the query and rotate the output back (AttentionArgs).
template <int HD>
struct AnyCache {
  static constexpr bool kGeneral = true;
  const uint8_t* kc;
  const uint8_t* vc;
  int64_t k_bytes, v_bytes;
  GgmlType kt, vt;
  __device__ explicit AnyCache(const AttentionArgs& a)
      : kc(static_cast<const uint8_t*>(a.k_cache)), vc(static_cast<const uint8_t*>(a.v_cache)),
        k_bytes(detail::kv_head_bytes(a.k_type, HD)), v_bytes(detail::kv_head_bytes(a.v_type, HD)),
        kt(a.k_type), vt(a.v_type) {}
  __device__ float k(int64_t r, int d) const { return detail::kv_value(kt, kc + r * k_bytes, d); }
  __device__ float v(int64_t r, int d) const { return detail::kv_value(vt, vc + r * v_bytes, d); }
  // Q4_1/Q5_1 K only: the min of block b of head row r.
  __device__ float k_min(int64_t r, int b) const { return detail::kv_block_min(kt, kc + r * k_bytes, b); }
};

// The part of a score that lane `lane` adds before the warp sum for a Q4_1/Q5_1 K (kv_quant_device.cuh
// round_query_like_cpu): lanes b < head_dim/32 add block b's min × the query's sum_fix[b].
struct MinTerm {
  bool on = false;  // K is Q4_1/Q5_1 (uniform across the grid)
  float fix = 0.f;  // this lane's sum_fix[lane] × scale (lanes < head_dim/32)
};

// The query of one head as a warp holds it (q[m] = dim lane + 32m), ready to dot with K: for the
// general path rotated and rounded as the CPU's flash attention does it, then × scale.
template <class C, int M>
__device__ __forceinline__ void prepare_query(const AttentionArgs& a, float (&q)[M], int lane, MinTerm& mt) {
  if constexpr (C::kGeneral) {
    if (a.n_rot_k > 0) detail::warp_hadamard(q, a.n_rot_k, a.rot_scale_k, lane);
    float fix[M];
    detail::round_query_like_cpu(q, a.k_type, fix);
    mt.on = detail::kv_affine(a.k_type);
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (lane == m) mt.fix = fix[m] * a.scale;
  }
#pragma unroll
  for (int m = 0; m < M; ++m) q[m] *= a.scale;
}

// Output row o (o[m] = dim lane + 32m, normalised) of token t, head h: rotated back from the V
// cache's rotation when there is one, gated, stored. Called by all lanes of a warp.
template <int HD>
__device__ __forceinline__ void store_rotated_out(const AttentionArgs& a, float (&o)[HD / 32], int64_t t, int h, int lane) {
  detail::warp_hadamard(o, a.n_rot_v, a.rot_scale_v, lane);
#pragma unroll
  for (int m = 0; m < HD / 32; ++m) {
    const int d = lane + 32 * m;
    float x = o[m];
    if (a.gate) x *= sigmoidf_(a.gate[t * a.gate_ld_token + int64_t{h} * a.gate_ld_head + d]);
    a.out[t * a.out_ld_token + int64_t{h} * HD + d] = x;
  }
}

// Weight of a partial softmax state with max m relative to the global max M (0 for empty states).
__device__ __forceinline__ float rescale(float m, float M) { return m == -INFINITY ? 0.f : expf(m - M); }

// grid (n_head, n_tokens), HD threads: merges the n_split partials of one (token, head); with
// kRotateOut (general path, rotated V) warp 0 rotates the merged row back.
template <int HD, bool kRotateOut>
__global__ void attention_combine_kernel(AttentionArgs a, int n_split) {
  FERRY_PDL_WAIT();
  const int h = blockIdx.x, d = threadIdx.x;
  const int64_t t = blockIdx.y;
  const float* part = static_cast<const float*>(a.workspace) + (t * a.n_head + h) * n_split * (HD + 2);
  float Mx = -INFINITY;
  for (int s = 0; s < n_split; ++s) Mx = fmaxf(Mx, part[s * (HD + 2)]);
  float L = 0.f, o = 0.f;
  for (int s = 0; s < n_split; ++s) {
    const float w = rescale(part[s * (HD + 2)], Mx);
    L += part[s * (HD + 2) + 1] * w;
    o += part[s * (HD + 2) + 2 + d] * w;
  }
  o /= L;
  if constexpr (kRotateOut) {
    __shared__ float sm_o[HD];
    sm_o[d] = o;
    __syncthreads();
    if (d < 32) {
      float r[HD / 32];
#pragma unroll
      for (int m = 0; m < HD / 32; ++m) r[m] = sm_o[d + 32 * m];
      store_rotated_out<HD>(a, r, t, h, d);
    }
    return;
  }
  if (a.gate) o *= sigmoidf_(a.gate[t * a.gate_ld_token + int64_t{h} * a.gate_ld_head + d]);
  a.out[t * a.out_ld_token + int64_t{h} * HD + d] = o;
}

// The kernels' one dispatch over cache types: the two plain pairs, everything else general.
enum class CacheKind { f16, f32, any };
inline CacheKind cache_kind(const AttentionArgs& a) {
  if (a.k_type == a.v_type && a.k_type == GgmlType::F16) return CacheKind::f16;
  if (a.k_type == a.v_type && a.k_type == GgmlType::F32) return CacheKind::f32;
  return CacheKind::any;
}

// The combine kernel over the n_split partials in a.workspace, one block per (head, token).
template <int HD>
void launch_combine(const AttentionArgs& a, int n_split, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tokens));
  if (cache_kind(a) == CacheKind::any && a.n_rot_v > 0) launch(attention_combine_kernel<HD, true>, grid, HD, 0, stream, a, n_split);
  else launch(attention_combine_kernel<HD, false>, grid, HD, 0, stream, a, n_split);
  FERRY_CUDA_CHECK_LAUNCH("attention_combine_kernel");
}

// Merge of the split kernels' partials, parallel over splits: grid (n_head, n_tokens, HD/32), 8
// warps. Lane l of every warp owns dim 32·blockIdx.z + l; warp w folds splits w, w+8, ... into a
// running (max, sum, acc) whose loads do not wait for the previous split's arithmetic, then warp 0
// merges the 8 states, normalises, gates and stores. The plain combine kernel (one thread per dim
// walking all splits) is latency-bound at hundreds of splits with only n_head·n_tokens blocks;
// this one has HD/32 times the blocks and 8 times the independent loads. Not for a rotated V
// (the rotation needs whole rows: attention_combine_kernel).
constexpr int kMergeWarps = 8;
template <int HD>
__global__ void __launch_bounds__(32 * kMergeWarps) attention_merge_kernel(AttentionArgs a, int n_split) {
  FERRY_PDL_WAIT();
  __shared__ float sm_m[kMergeWarps], sm_l[kMergeWarps], sm_o[kMergeWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.x, d = blockIdx.z * 32 + lane;
  const int64_t t = blockIdx.y;
  const float* part = static_cast<const float*>(a.workspace) + (t * a.n_head + h) * n_split * (HD + 2);
  float m = -INFINITY, l = 0.f, o = 0.f;
#pragma unroll 4
  for (int s = warp; s < n_split; s += kMergeWarps) {
    const float* p = part + int64_t{s} * (HD + 2);
    const float ms = p[0], ls = p[1], os = p[2 + d];
    const float mn = fmaxf(m, ms);
    const float wa = rescale(m, mn), wb = rescale(ms, mn);
    l = l * wa + ls * wb;
    o = o * wa + os * wb;
    m = mn;
  }
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
  sm_o[warp][lane] = o;
  __syncthreads();
  if (warp != 0) return;
  float Mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) Mx = fmaxf(Mx, sm_m[w]);
  float L = 0.f, O = 0.f;
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) {
    const float wt = rescale(sm_m[w], Mx);
    L += sm_l[w] * wt;
    O += sm_o[w][lane] * wt;
  }
  O /= L;
  if (a.gate) O *= sigmoidf_(a.gate[t * a.gate_ld_token + int64_t{h} * a.gate_ld_head + d]);
  a.out[t * a.out_ld_token + int64_t{h} * HD + d] = O;
}

// The reduce of n_split partials in a.workspace that the split kernels (attention_split.cu,
// attention_staged.cu) wrote: the merge kernel, or the combine kernel where V is rotated.
template <int HD>
void launch_reduce(const AttentionArgs& a, int n_split, cudaStream_t stream) {
  if (cache_kind(a) == CacheKind::any && a.n_rot_v > 0) return launch_combine<HD>(a, n_split, stream);
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tokens), HD / 32);
  launch(attention_merge_kernel<HD>, grid, 32 * kMergeWarps, 0, stream, a, n_split);
  FERRY_CUDA_CHECK_LAUNCH("attention_merge_kernel");
}

// M values of T read as one vector load (the plain caches' rows, M contiguous dims per lane).
template <int M, typename T>
struct alignas(sizeof(T) * M) RowPiece {
  T v[M];
};

// Throws ErrorKind::invalid_arg (or unsupported) naming what in `a` the kernels cannot run.
void check_args(const char* op, const AttentionArgs& a);

#define FERRY_DISPATCH_HEAD_DIM(hd, op, ...)                                      \
  switch (hd) {                                                                   \
    case 32: { constexpr int kHD = 32; __VA_ARGS__; break; }                      \
    case 64: { constexpr int kHD = 64; __VA_ARGS__; break; }                      \
    case 128: { constexpr int kHD = 128; __VA_ARGS__; break; }                    \
    case 256: { constexpr int kHD = 256; __VA_ARGS__; break; }                    \
    default:                                                                      \
      throw_unsupported(std::string(op) + ": head_dim " + std::to_string(hd) +   \
                        " (supported: 32, 64, 128, 256)");                        \
  }

// Flash-decoding splits: enough blocks in all to fill a big GPU (about 4 per SM of a 132-SM
// H100) whatever the KV head count (2 for qwen35moe, 4 for qwen3moe), each split ≥ 64 keys so the
// partials stay small beside the cache they summarise.
constexpr int64_t kSplitBlocks = 528;
constexpr int64_t kMinKeysPerSplit = 64;

inline int64_t split_count(int64_t n_tokens, int n_head_kv, int64_t n_kv) {
  const int64_t want = (kSplitBlocks + n_head_kv * n_tokens - 1) / (n_head_kv * n_tokens);
  return std::max<int64_t>(1, std::min(want, (n_kv + kMinKeysPerSplit - 1) / kMinKeysPerSplit));
}

}  // namespace ferry::cuda::attn
