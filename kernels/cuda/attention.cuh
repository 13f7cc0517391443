#pragma once
// Causal GQA attention over a KV cache, for decode (one or a few new tokens: split-K "rows"
// kernel) and prefill (tiled kernel: 16 queries share each K/V tile staged in shared memory).
// Online softmax in float; the KV cache may be F16 or F32. The new tokens' K and V must already be
// in the cache (kv_store) at rows p0 .. p0+n_tokens−1.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cuda {

struct AttentionArgs {
  // (n_tokens, n_head, head_dim): head h of token t at q + t·q_ld_token + h·q_ld_head.
  const float* q = nullptr;
  int64_t q_ld_token = 0, q_ld_head = 0;
  // (n_ctx, n_head_kv, head_dim) contiguous: key j of kv head g at k_cache + (j·n_head_kv + g)·head_dim.
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  GgmlType kv_type = GgmlType::F16;  // F16 or F32
  // Optional output gate (qwen35 full attention): out ⊙= sigmoid(gate), same layout as q.
  const float* gate = nullptr;
  int64_t gate_ld_token = 0, gate_ld_head = 0;
  // (n_tokens, n_head·head_dim): head h of token t at out + t·out_ld_token + h·head_dim.
  float* out = nullptr;
  int64_t out_ld_token = 0;
  int64_t n_tokens = 0;
  int64_t p0 = 0;  // position of the first new token; token t sees keys 0 .. p0 + t
  int n_head = 0, n_head_kv = 0, head_dim = 0;  // head_dim ∈ {32, 64, 128, 256}
  float scale = 1.f;                             // usually 1/√head_dim
  // Scratch for split-K decode (long contexts); nullptr/too small → no split (still correct).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Workspace that lets decode of n_tokens ≤ kAttentionRowsMaxTokens split a context of n_kv keys.
size_t attention_workspace_bytes(int64_t n_tokens, int n_head, int head_dim, int64_t n_kv);
inline constexpr int64_t kAttentionRowsMaxTokens = 4;

// Dispatch: n_tokens ≤ kAttentionRowsMaxTokens → rows kernel, else tiled.
void attention(const AttentionArgs& a, cudaStream_t stream);
// The two paths, callable directly (tests compare both with the reference).
void attention_rows(const AttentionArgs& a, cudaStream_t stream);
void attention_tiled(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ferry::cuda
