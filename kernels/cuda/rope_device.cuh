#pragma once
// NEOX RoPE on one pair of a head vector (include from .cu files only), written once for
// rope_neox (elementwise.cu) and the fused attention prep (attention_prep.cu): one source for the
// angle and the rotation keeps the two kernels' results identical bit for bit.
#include <cmath>
#include <cstdint>

namespace ferry::cuda::detail {

// As ggml's CUDA rope: theta = pos · theta_scale^i, theta_scale = freq_base^(−2/n_rot) (host side).
inline float rope_theta_scale(float freq_base, int n_rot) { return powf(freq_base, -2.0f / static_cast<float>(n_rot)); }

// Rotates the pair (v[i], v[i + half]) of a head vector at position pos (i < half = n_rot/2).
__device__ __forceinline__ void rope_neox_pair(float* v, int i, int half, int32_t pos, float theta_scale) {
  const float theta = static_cast<float>(pos) * powf(theta_scale, static_cast<float>(i));
  float s, c;
  sincosf(theta, &s, &c);
  const float x0 = v[i], x1 = v[i + half];
  v[i] = x0 * c - x1 * s;
  v[i + half] = x0 * s + x1 * c;
}

}  // namespace ferry::cuda::detail
