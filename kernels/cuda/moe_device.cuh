#pragma once
// Device side of the MoE kernels (include from .cu files only): the one-warp rows every MoE kernel
// computes — silu(gate·x) ⊙ (up·x) of one row, and a down row — so that moe.cu's per-pair kernels
// and moe_grouped.cu's per-expert tiles give the same bits for the same (row, token).
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda::detail {

constexpr int kMoeWarps = 4;  // warps per block of the MoE row kernels: one output row each

// One warp: silu(gate·x) ⊙ (up·x) of one row of expert p for NB tokens at once: token b's x is
// xt[b] and lane 0 writes its result to *out[b] for b < nb (the tokens past nb repeat an earlier
// one and are not written). Each token's sums run unit by unit in the same order whatever NB, so a
// token's result is the same bits in a tile of 8 as alone; the weight units are read once for all.
template <GgmlType T, int NB>
__device__ __forceinline__ void gate_up_rows(const ExpertPtrs& p, int64_t row, int64_t n_embd,
                                             const float* const (&xt)[NB], int nb, float* const (&out)[NB]) {
  using U = Unit<T>;
  const int lane = threadIdx.x & 31;
  const int64_t rb = detail::row_bytes_of<T>(n_embd);
  if (row == 0 && lane == 0) {
    FERRY_EMU_CHECK_DEVICE_POINTER(p.gate, "expert gate");
    FERRY_EMU_CHECK_DEVICE_POINTER(p.up, "expert up");
  }
  const uint8_t* g = static_cast<const uint8_t*>(p.gate) + row * rb;
  const uint8_t* u = static_cast<const uint8_t*>(p.up) + row * rb;
  float ag[NB], au[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) ag[b] = au[b] = 0.f;
  for (int64_t un = lane; un < n_embd / U::kValues; un += 32) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      ag[b] += detail::unit_dot<T>(g, un, xt[b]);
      au[b] += detail::unit_dot<T>(u, un, xt[b]);
    }
  }
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    if (b >= nb) break;  // nb is the same for the whole warp
    const float sg = detail::warp_sum(ag[b]), su = detail::warp_sum(au[b]);
    if (lane == 0) *out[b] = sg / (1.f + expf(-sg)) * su;
  }
}

// One warp: down row `row` of expert p against NB inputs at once, v[b] = row · ht[b] (n_ff), summed
// over the warp (every lane has them); each the same bits whatever NB.
template <GgmlType T, int NB>
__device__ __forceinline__ void down_rows(const ExpertPtrs& p, int64_t row, int64_t n_ff, const float* const (&ht)[NB],
                                          float (&v)[NB]) {
  using U = Unit<T>;
  const int lane = threadIdx.x & 31;
  if (row == 0 && lane == 0) FERRY_EMU_CHECK_DEVICE_POINTER(p.down, "expert down");
  const uint8_t* d = static_cast<const uint8_t*>(p.down) + row * detail::row_bytes_of<T>(n_ff);
#pragma unroll
  for (int b = 0; b < NB; ++b) v[b] = 0.f;
  for (int64_t un = lane; un < n_ff / U::kValues; un += 32) {
#pragma unroll
    for (int b = 0; b < NB; ++b) v[b] += detail::unit_dot<T>(d, un, ht[b]);
  }
#pragma unroll
  for (int b = 0; b < NB; ++b) v[b] = detail::warp_sum(v[b]);
}

// The single-token forms (decode, and the per-pair kernels).
template <GgmlType T>
__device__ __forceinline__ void gate_up_row(const ExpertPtrs& p, int64_t row, int64_t n_embd, const float* xt,
                                            float* out) {
  const float* const x1[1] = {xt};
  float* const o1[1] = {out};
  gate_up_rows<T, 1>(p, row, n_embd, x1, 1, o1);
}
template <GgmlType T>
__device__ __forceinline__ float down_row(const ExpertPtrs& p, int64_t row, int64_t n_ff, const float* ht) {
  const float* const h1[1] = {ht};
  float v[1];
  down_rows<T, 1>(p, row, n_ff, h1, v);
  return v[0];
}

}  // namespace ferry::cuda::detail
