#pragma once
// The prologue of an attention block in one launch (Ops::attention_prep on CUDA): after the q/k/v
// projections, the per-head RMSNorm of q and k, NEOX RoPE of both, and the store of k and v into
// the KV cache. The same arithmetic as the kernels it replaces (norm.cu's norm_kernel<rms>,
// elementwise.cu's rope_neox through rope_device.cuh, kv_store through kv_store_device.cuh), so
// the results equal theirs bit for bit (tests/gpu/test_gpu_attention_prep.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cuda {

struct AttentionPrepArgs {
  float* q = nullptr;        // token t, head h at q + (t·n_head + h)·q_ld_head: head_dim floats, in place
  int64_t q_ld_head = 0;     // head_dim, or 2·head_dim for rows of [q | gate]
  int n_head = 0;
  float* k = nullptr;        // (n_tokens, n_head_kv, head_dim) contiguous, in place
  const float* v = nullptr;  // (n_tokens, n_head_kv, head_dim_v) contiguous
  const float* q_norm = nullptr;  // (head_dim)
  const float* k_norm = nullptr;  // (head_dim)
  float eps = 0.f;
  int n_rot = 0;                  // RoPE on the first n_rot dims of each head (even, ≤ head_dim)
  const int32_t* pos = nullptr;   // (n_tokens) positions, device memory
  float freq_base = 0.f;
  // The cache: k_cache (n_ctx, n_head_kv, head_dim) of k_type, v_cache likewise with head_dim_v;
  // rows [p0, p0 + n_tokens) are written. Quantized rows are rotated in chunks of n_rot_k / n_rot_v
  // (0: none) with scale rot_scale_k / rot_scale_v, as kv_store_quantized.
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  GgmlType k_type = GgmlType::F16, v_type = GgmlType::F16;
  int n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  int n_rot_k = 0, n_rot_v = 0;
  float rot_scale_k = 1.f, rot_scale_v = 1.f;
  int64_t p0 = 0, n_tokens = 0;
  // When set (device memory: the batch's positions), the rows written are pos[0] + t and p0 is
  // ignored: a step graph replays with the same arguments token after token (cuda_ops.cpp).
  const int32_t* p0_dev = nullptr;
};

// One launch for any n_tokens: one warp per (token, head) row of q (norm, then RoPE), one block
// per token for k (its heads normed and rotated by the block's warps, then the token row stored
// in k_type) and one per token for v (stored in v_type). Every KV type kv_store takes.
void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream);

}  // namespace ferry::cuda
