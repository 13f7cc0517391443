// Fused decode kernels (fused.cuh).
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/fused.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_device.cuh"
#include "kernels/cuda/routing_device.cuh"

namespace ferry::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// The matrices of one launch, by value: row_end[i] is the end of matrix i in the launch's rows.
struct MultiArgs {
  const uint8_t* w[kMaxMatvecOuts];
  const uint8_t* up[kMaxMatvecOuts];  // SwiGLU pairs' up matrix, else nullptr
  float* y[kMaxMatvecOuts];
  int64_t row_end[kMaxMatvecOuts];
  GgmlType type[kMaxMatvecOuts];
  int n;
};

// The last-block router epilogue (RouteEpilogue). Every thread of the block calls it.
__device__ __forceinline__ void route_in_last_block(const RouteEpilogue& r) {
  __shared__ bool last;
  __syncthreads();  // every warp of the block has written its rows
  if (threadIdx.x == 0) {
    __threadfence();  // the block's rows are visible to all before the count includes it
    last = atomicAdd(r.counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  FERRY_DYNAMIC_SHARED(float, prob);
  if (threadIdx.x < 32) detail::route_token(r.logits, r.n_expert, r.k, r.ids, r.weights, r.renormalize, r.scale, prob);
  if (threadIdx.x == 0) *r.counter = 0;
}

void check_route_epilogue(const char* op, const RouteEpilogue& r) {
  require(r.counter && r.logits && r.ids && r.weights, op, "route: null pointer");
  require(r.n_expert >= 1 && r.n_expert <= 4096 && r.k >= 1 && r.k <= r.n_expert && r.k <= 64, op,
          "route: n_expert must be in [1, 4096] and k in [1, min(n_expert, 64)]");
}

template <GgmlType T>
__device__ __forceinline__ float row_dot(const uint8_t* wrow, int64_t cols, const float* x, int lane) {
  float acc = 0.f;
  const int64_t n_units = cols / detail::Unit<T>::kValues;
  for (int64_t u = lane; u < n_units; u += 32) acc += detail::unit_dot<T>(wrow, u, x);
  return detail::warp_sum(acc);
}

// Row r of matrix i (of type T): its dot, or silu(gate·x) ⊙ (up·x) for a SwiGLU pair.
template <GgmlType T>
__device__ __forceinline__ float target_row(const MultiArgs& m, int i, int64_t r, int64_t cols, const float* x,
                                            int lane) {
  const int64_t rb = detail::row_bytes_of<T>(cols);
  float s = row_dot<T>(m.w[i] + r * rb, cols, x, lane);
  if (m.up[i]) {
    const float u = row_dot<T>(m.up[i] + r * rb, cols, x, lane);
    s = s / (1.f + expf(-s)) * u;
  }
  return s;
}

// One warp per row of the concatenated matrices, whatever their types (a warp-uniform switch per
// row); the lane order of each dot is matvec_rows_kernel's. With route.counter, the block that
// finishes last routes the token from the router's logits (RouteEpilogue).
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matvec_multi_kernel(MultiArgs m, int64_t cols, const float* __restrict__ x, RouteEpilogue route) {
  FERRY_PDL_WAIT();
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  int i = 0;
  while (i < m.n && row >= m.row_end[i]) ++i;
  if (i < m.n) {
    const int64_t r = row - (i == 0 ? 0 : m.row_end[i - 1]);
    float s = 0.f;
    switch (m.type[i]) {
      FERRY_WEIGHT_TYPE_CASES(s = target_row<kT>(m, i, r, cols, x, lane))
      default: break;  // the host checked every type
    }
    if (lane == 0) m.y[i][r] = s;
  }
  if (route.counter) route_in_last_block(route);
}

// Same expressions as sigmoid_gate_add_kernel, add_kernel and norm_kernel<rms>.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    residual_norm_kernel(float* x, float* a, const float* __restrict__ b, const float* __restrict__ gate_logit,
                         const float* __restrict__ w, float* h, int64_t n_rows, int64_t n, float eps) {
  FERRY_PDL_WAIT();
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r >= n_rows) return;
  float* xr = x + r * n;
  float* ar = a + r * n;
  const float g = b ? 1.f / (1.f + expf(-gate_logit[r])) : 0.f;
  float ss = 0.f;
  for (int64_t i = lane; i < n; i += 32) {
    float d = ar[i];
    if (b) {
      d += g * b[r * n + i];
      ar[i] = d;
    }
    const float v = xr[i] + d;
    xr[i] = v;
    ss += v * v;
  }
  if (!w) return;
  ss = detail::warp_sum(ss);
  const float s = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
  float* hr = h + r * n;
  for (int64_t i = lane; i < n; i += 32) {
    float v = xr[i] * s;
    v *= w[i];
    hr[i] = v;
  }
}

}  // namespace

bool matvec_multi_supported(GgmlType t) {
  switch (t) {
#define FERRY_MULTI_CASE(T) case GgmlType::T: return true;
    FERRY_MULTI_CASE(F32) FERRY_MULTI_CASE(F16) FERRY_MULTI_CASE(BF16) FERRY_MULTI_CASE(Q8_0)
    FERRY_MULTI_CASE(Q4_K) FERRY_MULTI_CASE(Q5_K) FERRY_MULTI_CASE(Q6_K) FERRY_MULTI_CASE(Q4_0)
    FERRY_MULTI_CASE(Q4_1) FERRY_MULTI_CASE(Q5_0) FERRY_MULTI_CASE(Q5_1) FERRY_MULTI_CASE(Q2_K)
    FERRY_MULTI_CASE(Q3_K) FERRY_MULTI_CASE(IQ4_NL) FERRY_MULTI_CASE(IQ4_XS) FERRY_MULTI_CASE(MXFP4)
#undef FERRY_MULTI_CASE
    default: return false;
  }
}

void matvec_multi(const MatvecOut* outs, int n, int64_t cols, const float* x, const RouteEpilogue* route,
                  cudaStream_t stream) {
  const char* op = "matvec_multi";
  require(n >= 1 && n <= kMaxMatvecOuts, op, "1.." + std::to_string(kMaxMatvecOuts) + " matrices");
  require(x && aligned(x, 16), op, "x must be non-null and 16-byte aligned");
  MultiArgs m{};
  m.n = n;
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    const MatvecOut& o = outs[i];
    require(matvec_multi_supported(o.type), op, "matrix " + std::to_string(i) + ": a weight type without a kernel");
    check_weight_args(op, o.type, o.w, o.rows, cols);
    require(o.y != nullptr, op, "null output");
    require(!o.up || (o.type != GgmlType::F32 && aligned(o.up, 16)), op,
            "a SwiGLU pair's up matrix must be quantized or 16-bit, like its gate");
    m.w[i] = static_cast<const uint8_t*>(o.w);
    m.up[i] = static_cast<const uint8_t*>(o.up);
    m.y[i] = o.y;
    m.type[i] = o.type;
    rows += o.rows;
    m.row_end[i] = rows;
  }
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  require(blocks < (1ll << 31), op, "too many rows");
  RouteEpilogue r{};
  size_t shared = 0;
  if (route) {
    check_route_epilogue(op, *route);
    r = *route;
    shared = sizeof(float) * static_cast<size_t>(r.n_expert);
  }
  launch(matvec_multi_kernel, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, shared, stream, m, cols, x, r);
  FERRY_CUDA_CHECK_LAUNCH("matvec_multi_kernel");
}

void residual_norm(float* x, float* a, const float* b, const float* gate_logit, const float* w, float* h,
                   int64_t n_rows, int64_t n, float eps, cudaStream_t stream) {
  const char* op = "residual_norm";
  require(x && a && (!b || gate_logit) && (!w || h), op, "null pointer");
  require(n > 0 && n_rows >= 0, op, "bad shape");
  if (n_rows == 0) return;
  const int64_t blocks = (n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  require(blocks < (1ll << 31), op, "too many rows");
  launch(residual_norm_kernel, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream, x, a, b, gate_logit, w,
         h, n_rows, n, eps);
  FERRY_CUDA_CHECK_LAUNCH("residual_norm_kernel");
}

}  // namespace ferry::cuda
