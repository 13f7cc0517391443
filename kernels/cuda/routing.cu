// Router top-k and argmax.
#include <cfloat>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/quant_device.cuh"
#include "kernels/cuda/routing_device.cuh"

namespace ferry::cuda {
namespace {

constexpr int kMaxExperts = 4096;
constexpr int kMaxTopK = 64;

using detail::warp_best;

// One warp per token; probabilities live in shared memory (n_expert floats).
__global__ void route_topk_kernel(const float* __restrict__ logits, int n_expert, int k,
                                  int32_t* __restrict__ ids, float* __restrict__ weights,
                                  bool renormalize, float scale) {
  FERRY_PDL_WAIT();
  FERRY_DYNAMIC_SHARED(float, prob);
  const int64_t t = blockIdx.x;
  detail::route_token(logits + t * n_expert, n_expert, k, ids + t * k, weights + t * k, renormalize, scale, prob);
}

__global__ void argmax_kernel(const float* __restrict__ x, int64_t ld, int64_t n, int32_t* out) {
  FERRY_PDL_WAIT();
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
