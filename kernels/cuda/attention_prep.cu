// The attention block's q/k norms + RoPE + KV store in one launch (attention_prep.cuh).
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/attention_prep.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kv_store_device.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/norm_device.cuh"
#include "kernels/cuda/quant_device.cuh"
#include "kernels/cuda/rope_device.cuh"

namespace ferry::cuda {
namespace {

// norm_kernel's block (one warp per row); the K/V stores need no particular size (kv_store_row).
constexpr int kWarps = 4;

// One warp: row r (n floats, in place) ← rmsnorm(r)·w (norm_kernel<rms>'s row, norm_device.cuh),
// then rope_neox's rotation of its first n_rot dims at position pos.
__device__ void norm_rope_row(float* r, const float* __restrict__ w, int n, float eps, int n_rot, int32_t pos,
                              float theta_scale, int lane) {
  detail::norm_row<detail::NormKind::rms>(r, w, nullptr, r, n, eps, 1.f);
  __syncwarp();  // the pairs below read values other lanes normed
  const int half = n_rot / 2;
  for (int i = lane; i < half; i += 32) detail::rope_neox_pair(r, i, half, pos, theta_scale);
}

// Token row p of the cache ← src (row_elems floats): F32 and F16 as kv_store_kernel (round to
// nearest even), the other types through kv_store_row (x: row_elems floats of shared memory).
__device__ void store_row(const float* src, float* x, int64_t row_elems, void* cache, GgmlType type,
                          int64_t row_bytes, int64_t p, int n_rot, float rot_scale) {
  if (type == GgmlType::F32 || type == GgmlType::F16) {
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
      if (type == GgmlType::F16) static_cast<__half*>(cache)[p * row_elems + e] = __float2half_rn(src[e]);
      else static_cast<float*>(cache)[p * row_elems + e] = src[e];
    }
    return;
  }
  detail::kv_store_row(src, x, row_elems, static_cast<uint8_t*>(cache) + p * row_bytes, type, row_bytes, n_rot,
                       rot_scale);
}

// Blocks [0, q_blocks): kWarps q rows each. Then n_tokens blocks of K, then n_tokens blocks of V.
__global__ void __launch_bounds__(32 * kWarps)
    attention_prep_kernel(AttentionPrepArgs a, float theta_scale, int64_t q_blocks, int64_t k_row_bytes,
                          int64_t v_row_bytes) {
  FERRY_PDL_WAIT();
  FERRY_DYNAMIC_SHARED(float, x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.x;
  if (b < q_blocks) {
    const int64_t r = b * kWarps + warp;  // token r / n_head, head r % n_head
    if (r >= a.n_tokens * a.n_head) return;
    norm_rope_row(a.q + r * a.q_ld_head, a.q_norm, a.head_dim, a.eps, a.n_rot, a.pos[r / a.n_head], theta_scale,
                  lane);
    return;
  }
  const int64_t t = (b - q_blocks) % a.n_tokens;
  const int64_t row = (a.p0_dev ? int64_t{*a.p0_dev} : a.p0) + t;
  if (b - q_blocks < a.n_tokens) {
    const int64_t row_elems = int64_t{a.n_head_kv} * a.head_dim;
    float* kt = a.k + t * row_elems;
    for (int h = warp; h < a.n_head_kv; h += kWarps)
      norm_rope_row(kt + int64_t{h} * a.head_dim, a.k_norm, a.head_dim, a.eps, a.n_rot, a.pos[t], theta_scale, lane);
    __syncthreads();  // the token's K row is complete before the block stores it
    store_row(kt, x, row_elems, a.k_cache, a.k_type, k_row_bytes, row, a.n_rot_k, a.rot_scale_k);
  } else {
    const int64_t row_elems = int64_t{a.n_head_kv} * a.head_dim_v;
    store_row(a.v + t * row_elems, x, row_elems, a.v_cache, a.v_type, v_row_bytes, row, a.n_rot_v, a.rot_scale_v);
  }
}

// Bytes of a cache row of `type` (kv_store_row's checks for the quantized types; F32/F16 rows are
// addressed by element) and the shared memory its store stages.
struct RowStore {
  int64_t row_bytes = 0;
  size_t shared_bytes = 0;
};
RowStore row_store(const char* op, GgmlType type, int64_t row_elems, int n_rot) {
  if (type == GgmlType::F32 || type == GgmlType::F16) return {};
  return {detail::check_kv_store_row(op, type, row_elems, n_rot), static_cast<size_t>(row_elems) * sizeof(float)};
}

}  // namespace

void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream) {
  const char* op = "attention_prep";
  require(a.q && a.k && a.v && a.q_norm && a.k_norm && a.pos && a.k_cache && a.v_cache, op, "null pointer");
  require(a.n_head >= 1 && a.n_head_kv >= 1 && a.head_dim >= 1 && a.head_dim_v >= 1 && a.q_ld_head >= a.head_dim, op,
          "bad shape (heads, head sizes, q head stride below the head size)");
  require(a.n_rot > 0 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim, op,
          "n_rot (" + std::to_string(a.n_rot) + ") must be even and ≤ head_dim (" + std::to_string(a.head_dim) + ")");
  require(a.p0 >= 0 && a.n_tokens >= 0, op, "negative position or token count");
  if (a.n_tokens == 0) return;
  const RowStore ks = row_store(op, a.k_type, int64_t{a.n_head_kv} * a.head_dim, a.n_rot_k);
  const RowStore vs = row_store(op, a.v_type, int64_t{a.n_head_kv} * a.head_dim_v, a.n_rot_v);
  const int64_t q_blocks = (a.n_tokens * a.n_head + kWarps - 1) / kWarps;
  const int64_t blocks = q_blocks + 2 * a.n_tokens;
  require(blocks < (1ll << 31), op, "too many rows");
  launch(attention_prep_kernel, static_cast<unsigned>(blocks), 32 * kWarps, std::max(ks.shared_bytes, vs.shared_bytes),
         stream, a, detail::rope_theta_scale(a.freq_base, a.n_rot), q_blocks, ks.row_bytes, vs.row_bytes);
  FERRY_CUDA_CHECK_LAUNCH("attention_prep_kernel");
}

}  // namespace ferry::cuda
