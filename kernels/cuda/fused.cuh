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

// The router epilogue of a fused decode launch: once every block has written its rows (the
// router's logits among them), the block that finishes last routes the token (route_topk's
// arithmetic, kernels/cuda/routing_device.cuh) — the classic last-block pattern: each block fences
// its writes, then counts itself in. `counter` is one zeroed unsigned of device memory owned by the
// caller; the last block sets it back to 0, so a recorded graph replays it. Launches that share a
// counter must not overlap (one stream).
struct RouteEpilogue {
  unsigned* counter = nullptr;
  const float* logits = nullptr;  // (n_expert), written by the launch
  int n_expert = 0, k = 0;
  int32_t* ids = nullptr;         // (k)
  float* weights = nullptr;       // (k)
  bool renormalize = false;
  float scale = 1.f;
};

// y_i = W_i·x for n ≤ kMaxMatvecOuts matrices of `cols` columns sharing the input x (cols floats,
// 16-byte aligned), in one launch, whatever their weight types. One warp per row, as
// matvec_rows_kernel<T, 1>. With `route` (one token), also the token's routing from its logits.
void matvec_multi(const MatvecOut* outs, int n, int64_t cols, const float* x, const RouteEpilogue* route,
                  cudaStream_t stream);
// Whether matvec_multi takes matrices of type t (the weight types of FERRY_DISPATCH_WEIGHT_TYPE).
bool matvec_multi_supported(GgmlType t);

// Per token row r < n_rows of n floats: with b, a[r] += sigmoid(gate_logit[r])·b[r]; x[r] += a[r];
// with w, h[r] = rmsnorm(x[r])·w. x, a, b, h: (n_rows, n) contiguous. One warp per row.
void residual_norm(float* x, float* a, const float* b, const float* gate_logit, const float* w, float* h,
                   int64_t n_rows, int64_t n, float eps, cudaStream_t stream);

}  // namespace ferry::cuda
