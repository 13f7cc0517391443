#pragma once
// One row of the warp-per-row norms (norm.cu), as a device function: the norm kernels and the fused
// kernels that normalise rows in an epilogue (deltanet.cu: the delta rule's gated norm) run the
// same expressions in the same order, so their results agree bit for bit.
#include <cstdint>

#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda::detail {

enum class NormKind { rms, rms_gated, l2 };

// y = x·s (⊙ w) (⊙ silu(z)) over n floats, s from the row's sum of squares; every lane of one warp
// calls it. kFresh: x was written by other blocks of the same launch (read with __ldcg after the
// caller's fence).
template <NormKind K, bool kFresh = false>
__device__ __forceinline__ void norm_row(const float* xr, const float* w, const float* zr, float* yr, int64_t n,
                                         float eps, float extra_scale) {
  const int lane = threadIdx.x & 31;
  auto load = [&](int64_t i) { return kFresh ? __ldcg(xr + i) : xr[i]; };
  float ss = 0.f;
  for (int64_t i = lane; i < n; i += 32) {
    const float v = load(i);
    ss += v * v;
  }
  ss = warp_sum(ss);
  float s;
  if constexpr (K == NormKind::l2) s = extra_scale / fmaxf(sqrtf(ss), eps);
  else s = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = lane; i < n; i += 32) {
    float v = load(i) * s;
    if constexpr (K != NormKind::l2) {
      if (w) v *= w[i];
    }
    if constexpr (K == NormKind::rms_gated) {
      const float g = zr[i];
      v *= g / (1.f + expf(-g));
    }
    yr[i] = v;
  }
}

}  // namespace ferry::cuda::detail
