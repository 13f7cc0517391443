// Fused decode kernels (fused.cuh).
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/fused.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// The matrices of one launch, by value: row_end[i] is the end of matrix i in the launch's rows.
struct MultiArgs {
  const uint8_t* w[kMaxMatvecOuts];
  const uint8_t* up[kMaxMatvecOuts];  // SwiGLU pairs' up matrix, else nullptr
  float* y[kMaxMatvecOuts];
  int64_t row_end[kMaxMatvecOuts];
  bool f32[kMaxMatvecOuts];
  int n;
};

template <GgmlType T>
__device__ __forceinline__ float row_dot(const uint8_t* wrow, int64_t cols, const float* x, int lane) {
  float acc = 0.f;
  const int64_t n_units = cols / detail::Unit<T>::kValues;
  for (int64_t u = lane; u < n_units; u += 32) acc += detail::unit_dot<T>(wrow, u, x);
  return detail::warp_sum(acc);
}

// One warp per row of the concatenated matrices; the lane order of each dot is matvec_rows_kernel's.
template <GgmlType T>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matvec_multi_kernel(MultiArgs m, int64_t cols, const float* __restrict__ x) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  int i = 0;
  while (i < m.n && row >= m.row_end[i]) ++i;
  if (i == m.n) return;
  const int64_t r = row - (i == 0 ? 0 : m.row_end[i - 1]);
  float s;
  if (m.f32[i]) {
    s = row_dot<GgmlType::F32>(m.w[i] + r * cols * 4, cols, x, lane);
  } else {
    const int64_t rb = detail::row_bytes_of<T>(cols);
    s = row_dot<T>(m.w[i] + r * rb, cols, x, lane);
    if (m.up[i]) {
      const float u = row_dot<T>(m.up[i] + r * rb, cols, x, lane);
      s = s / (1.f + expf(-s)) * u;
    }
  }
  if (lane == 0) m.y[i][r] = s;
}

// Same expressions as sigmoid_gate_add_kernel, add_kernel and norm_kernel<rms>.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    residual_norm_kernel(float* x, float* a, const float* __restrict__ b, const float* __restrict__ gate_logit,
                         const float* __restrict__ w, float* h, int64_t n_rows, int64_t n, float eps) {
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

void matvec_multi(GgmlType t, const MatvecOut* outs, int n, int64_t cols, const float* x, cudaStream_t stream) {
  const char* op = "matvec_multi";
  require(n >= 1 && n <= kMaxMatvecOuts, op, "1.." + std::to_string(kMaxMatvecOuts) + " matrices");
  require(x && aligned(x, 16), op, "x must be non-null and 16-byte aligned");
  MultiArgs m{};
  m.n = n;
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    const MatvecOut& o = outs[i];
    require(o.type == t || o.type == GgmlType::F32, op, "matrix " + std::to_string(i) + " is neither the group's type nor F32");
    check_weight_args(op, o.type, o.w, o.rows, cols);
    require(o.y != nullptr, op, "null output");
    require(!o.up || (o.type == t && aligned(o.up, 16)), op, "a SwiGLU pair's up matrix must be of the group's type");
    m.w[i] = static_cast<const uint8_t*>(o.w);
    m.up[i] = static_cast<const uint8_t*>(o.up);
    m.y[i] = o.y;
    m.f32[i] = o.type == GgmlType::F32 && t != GgmlType::F32;
    rows += o.rows;
    m.row_end[i] = rows;
  }
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  require(blocks < (1ll << 31), op, "too many rows");
  FERRY_DISPATCH_WEIGHT_TYPE(t, op, {
    launch(matvec_multi_kernel<kT>, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream, m, cols, x);
  });
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
