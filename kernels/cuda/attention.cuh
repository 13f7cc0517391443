#pragma once
// Causal GQA attention over a KV cache, for decode (one or a few new tokens: the flash-decoding
// split kernel, or the split-K "rows" kernel for group sizes it has no instance for) and prefill (tiled kernel: 16 queries share each K/V tile staged in shared memory).
// Online softmax in float; the KV cache may be any of the nine KV types. The new tokens' K and V
// must already be in the cache (kv_store) at rows p0 .. p0+n_tokens−1.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cuda {

struct AttentionArgs {
  // (n_tokens, n_head, head_dim): head h of token t at q + t·q_ld_token + h·q_ld_head.
  const float* q = nullptr;
  int64_t q_ld_token = 0, q_ld_head = 0;
  // (n_ctx, n_head_kv, head_dim) contiguous: key j of kv head g at k_cache + (j·n_head_kv + g)·head_dim.
  // Quantized types: each head row is head_dim/32 whole blocks (kv_quant_device.cuh).
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  // Any of the nine KV cache types (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL), K and V
  // independently. F16/F16 and F32/F32 run the plain kernels; every other pair runs the general
  // instantiation, which follows llama.cpp's CPU flash attention: the query rotated (n_rot_k) and
  // rounded to vec_dot_type(k_type), the output rotated back (n_rot_v).
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  // Hadamard rotation of a quantized cache (kv_store's): chunks of n_rot values (0: none), scale
  // 1/√n_rot as the CPU computes it. Ignored by the plain kernels.
  int n_rot_k = 0, n_rot_v = 0;
  float rot_scale_k = 1.f, rot_scale_v = 1.f;
  // Optional output gate (qwen35 full attention): out ⊙= sigmoid(gate), same layout as q.
  const float* gate = nullptr;
  int64_t gate_ld_token = 0, gate_ld_head = 0;
  // (n_tokens, n_head·head_dim): head h of token t at out + t·out_ld_token + h·head_dim.
  float* out = nullptr;
  int64_t out_ld_token = 0;
  int64_t n_tokens = 0;
  int64_t p0 = 0;  // position of the first new token; token t sees keys 0 .. p0 + t
  // Decode (n_tokens ≤ kAttentionRowsMaxTokens) only: when set, the kernels read the first new
  // token's position here (device memory, the batch's positions) and p0 only plans the launch —
  // the splits cover keys 0 .. p0 + n_tokens − 1, which must reach the position read (the host
  // plans with attention_plan_keys). A step graph then replays token after token with the same
  // arguments (runtime/backend/cuda_ops.cpp).
  const int32_t* p0_dev = nullptr;
  int n_head = 0, n_head_kv = 0, head_dim = 0;  // head_dim ∈ {32, 64, 128, 256}
  float scale = 1.f;                             // usually 1/√head_dim
  // Scratch for split-K decode (long contexts); nullptr/too small → no split (still correct).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The keys a decode launch is planned for when the kernels read the position from p0_dev: n_kv
// rounded up to 256, then to eighths of an octave (m·2^e, m = 8..15), at most n_ctx — so a
// context's plans change ~8 times per doubling, each split grid at most 1/8 larger than n_kv needs.
int64_t attention_plan_keys(int64_t n_kv, int64_t n_ctx);

// Workspace that lets decode of n_tokens ≤ kAttentionRowsMaxTokens split a context of n_kv keys.
size_t attention_workspace_bytes(int64_t n_tokens, int n_head, int head_dim, int64_t n_kv);
inline constexpr int64_t kAttentionRowsMaxTokens = 4;

// Dispatch: n_tokens ≤ kAttentionRowsMaxTokens → the staged flash-decoding where it applies, else
// the register split where it applies, else the rows kernel; more tokens → tiled.
void attention(const AttentionArgs& a, cudaStream_t stream);
// The paths, callable directly (tests compare each with the reference).
void attention_rows(const AttentionArgs& a, cudaStream_t stream);
void attention_tiled(const AttentionArgs& a, cudaStream_t stream);
// Flash-decoding: the KV sequence split across blocks, one block per (KV head, token, split) holding
// the whole GQA group, so each K/V byte is read once per KV head; then a reduce kernel. Applies to
// n_tokens ≤ kAttentionRowsMaxTokens, groups of 2, 4 or 8 query heads per KV head, a context long
// enough for two splits of 64 keys and a workspace for them (attention_workspace_bytes); where it
// does not apply attention_split runs attention_rows.
void attention_split(const AttentionArgs& a, cudaStream_t stream);
bool attention_split_applies(const AttentionArgs& a);
// Flash-decoding with K/V tiles staged in shared memory, one warp per query head
// (attention_staged.cu): the dispatch's decode path where it applies — groups of 2, 4 or 8, a
// workspace, plain F16/F32 caches 16-byte aligned, other KV pairs whose rows are whole 4-byte
// words; elsewhere attention_staged runs attention_split. Same partials and reduce as attention_split.
void attention_staged(const AttentionArgs& a, cudaStream_t stream);
bool attention_staged_applies(const AttentionArgs& a);

}  // namespace ferry::cuda
