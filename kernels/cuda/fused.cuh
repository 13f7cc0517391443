#pragma once
// Fused decode kernels: several ops of a one-token step in one launch, each the same arithmetic as
// the unfused kernels it replaces (matvec.cu's warp-per-row dot, norm.cu's RMSNorm,
// elementwise.cu's shared-expert gate), so results do not change with the launch count.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cuda {

// One matrix of matvec_multi: y = W·x, W (rows, cols) of `type`. With `up` (same type and shape),
// a SwiGLU pair: y = silu(W·x) ⊙ (up·x), both dots by the same warp (swiglu_kernel's expression).
struct MatvecOut {
  GgmlType type = GgmlType::F32;
  const void* w = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
  const void* up = nullptr;
};
constexpr int kMaxMatvecOuts = 8;

// y_i = W_i·x for n ≤ kMaxMatvecOuts matrices of `cols` columns sharing the input x (cols floats,
// 16-byte aligned), in one launch. Every matrix has type t or F32 (F32 matrices ride along with a
// quantized group: routers and gate vectors). One warp per row, as matvec_rows_kernel<T, 1>.
void matvec_multi(GgmlType t, const MatvecOut* outs, int n, int64_t cols, const float* x, cudaStream_t stream);
// Whether matvec_multi takes matrices of type t (the weight types of FERRY_DISPATCH_WEIGHT_TYPE).
bool matvec_multi_supported(GgmlType t);

// Per token row r < n_rows of n floats: with b, a[r] += sigmoid(gate_logit[r])·b[r]; x[r] += a[r];
// with w, h[r] = rmsnorm(x[r])·w. x, a, b, h: (n_rows, n) contiguous. One warp per row.
void residual_norm(float* x, float* a, const float* b, const float* gate_logit, const float* w, float* h,
                   int64_t n_rows, int64_t n, float eps, cudaStream_t stream);

}  // namespace ferry::cuda
