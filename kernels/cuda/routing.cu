// Router top-k and argmax.
#include <cfloat>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

constexpr int kMaxExperts = 4096;
constexpr int kMaxTopK = 64;

// Reduce (value, index) to the lane-wide best: larger value wins, lower index on ties.
__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
}

// One warp per token; probabilities live in shared memory (n_expert floats).
__global__ void route_topk_kernel(const float* __restrict__ logits, int n_expert, int k,
                                  int32_t* __restrict__ ids, float* __restrict__ weights,
                                  bool renormalize, float scale) {
  FERRY_DYNAMIC_SHARED(float, prob);
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* l = logits + t * n_expert;
  float mx = -FLT_MAX;
  for (int e = lane; e < n_expert; e += 32) {
    prob[e] = l[e];
    mx = fmaxf(mx, l[e]);
  }
  mx = detail::warp_max(mx);
  float sum = 0.f;
  for (int e = lane; e < n_expert; e += 32) {
    const float p = expf(prob[e] - mx);
    prob[e] = p;
    sum += p;
  }
  sum = detail::warp_sum(sum);
  const float inv = 1.f / sum;
  for (int e = lane; e < n_expert; e += 32) prob[e] *= inv;
  __syncwarp();
  float chosen_sum = 0.f;
  float my_w = 0.f;  // lane j keeps slot j's weight (k ≤ 64: lanes hold slots j and j+32)
  float my_w2 = 0.f;
  for (int j = 0; j < k; ++j) {
    float bv = -1.f;
    int bi = n_expert;
    for (int e = lane; e < n_expert; e += 32) {
      const float p = prob[e];
      if (p > bv) {  // strided scan visits indices in increasing order: first max kept
        bv = p;
        bi = e;
      }
    }
    warp_best(bv, bi);
    chosen_sum += bv;
    if (lane == (j & 31)) {
      if (j < 32) my_w = bv;
      else my_w2 = bv;
    }
    if (lane == 0) {
      ids[t * k + j] = bi;
      prob[bi] = -2.f;  // taken
    }
    __syncwarp();
  }
  // As llama.cpp: the sum is clamped to 2^-14 so vanishing probabilities cannot blow up.
  float norm = renormalize ? 1.f / fmaxf(chosen_sum, 6.103515625e-5f) : 1.f;
  if (scale != 0.f && scale != 1.f) norm *= scale;
  if (lane < k) weights[t * k + lane] = my_w * norm;
  if (lane + 32 < k) weights[t * k + lane + 32] = my_w2 * norm;
}

__global__ void argmax_kernel(const float* __restrict__ x, int64_t ld, int64_t n, int32_t* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* r = x + int64_t{blockIdx.x} * ld;
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = r[i];
    if (v != v) continue;  // NaN never wins
    if (bi < 0 || v > bv) {
      bv = v;
      bi = i;
    }
  }
  int bi32 = bi < 0 ? INT32_MAX : static_cast<int>(bi);
  warp_best(bv, bi32);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi32;
  }
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    bv = lane < nw ? sv[lane] : -INFINITY;
    bi32 = lane < nw ? si[lane] : INT32_MAX;
    warp_best(bv, bi32);
    if (lane == 0) out[blockIdx.x] = bi32 == INT32_MAX ? -1 : bi32;  // -1: the row is all NaN
  }
}

}  // namespace

void route_topk(const float* logits, int64_t n_tokens, int n_expert, int k, int32_t* ids,
                float* weights, bool renormalize, float scale, cudaStream_t stream) {
  const char* op = "route_topk";
  require(logits && ids && weights, op, "null pointer");
  require(n_expert >= 1 && n_expert <= kMaxExperts, op, "n_expert must be in [1, 4096]");
  require(k >= 1 && k <= n_expert && k <= kMaxTopK, op, "k must be in [1, min(n_expert, 64)]");
  require(n_tokens >= 0 && n_tokens < (1ll << 31), op, "bad n_tokens");
  if (n_tokens == 0) return;
  launch(route_topk_kernel, static_cast<unsigned>(n_tokens), 32, sizeof(float) * n_expert, stream,
         logits, n_expert, k, ids, weights, renormalize, scale);
  FERRY_CUDA_CHECK_LAUNCH("route_topk_kernel");
}

void argmax_rows(const float* x, int64_t ld, int64_t n_rows, int64_t n, int32_t* out,
                 cudaStream_t stream) {
  require(x && out && n > 0 && ld >= n && n < (1ll << 31), "argmax_rows", "bad arguments");
  if (n_rows <= 0) return;
  require(n_rows < (1ll << 31), "argmax_rows", "too many rows");
  launch(argmax_kernel, static_cast<unsigned>(n_rows), 256, 0, stream, x, ld, n, out);
  FERRY_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace ferry::cuda
