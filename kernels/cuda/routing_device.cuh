#pragma once
// The router's softmax + top-k + renormalisation for one token, run by one warp: the body of the
// route_topk kernel (routing.cu) and of the fused decode kernels that route in their last block
// (fused.cu), so both give the same ids and weights bit for bit.
#include <cfloat>
#include <cstdint>

#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda::detail {

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

// p = softmax(l); ids = the k largest p (descending, lowest index on ties); weights = p[ids],
// divided by their sum (clamped ≥ 2^-14) when renormalize, then times scale unless it is 0 or 1.
// Every lane of one warp calls it; prob: n_expert floats of shared memory. The logits are read
// with __ldcg: in a fused kernel other blocks wrote them (before a fence) during the same launch.
__device__ __forceinline__ void route_token(const float* l, int n_expert, int k, int32_t* ids, float* weights,
                                            bool renormalize, float scale, float* prob) {
  const int lane = threadIdx.x & 31;
  float mx = -FLT_MAX;
  for (int e = lane; e < n_expert; e += 32) {
    const float v = __ldcg(l + e);
    prob[e] = v;
    mx = fmaxf(mx, v);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int e = lane; e < n_expert; e += 32) {
    const float p = expf(prob[e] - mx);
    prob[e] = p;
    sum += p;
  }
  sum = warp_sum(sum);
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
      ids[j] = bi;
      prob[bi] = -2.f;  // taken
    }
    __syncwarp();
  }
  // As llama.cpp: the sum is clamped to 2^-14 so vanishing probabilities cannot blow up.
  float norm = renormalize ? 1.f / fmaxf(chosen_sum, 6.103515625e-5f) : 1.f;
  if (scale != 0.f && scale != 1.f) norm *= scale;
  if (lane < k) weights[lane] = my_w * norm;
  if (lane + 32 < k) weights[lane + 32] = my_w2 * norm;
}

}  // namespace ferry::cuda::detail
