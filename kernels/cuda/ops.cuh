#pragma once
// Row-wise and elementwise ops of the forward pass: norms, RoPE, SwiGLU, routing, gates, argmax,
// KV-cache stores. Plain device pointers, asynchronous on `stream`; shapes in comments, row-major,
// "ld" = row stride in elements. In-place use (y == x) is allowed where noted.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cuda {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w, rows r < n_rows of n values; w (n) or nullptr.
// x, y: (n_rows, n) with strides ldx, ldy. In place allowed. Also the per-head q/k norm
// (rows = tokens × heads).
void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t n_rows,
             int64_t n, float eps, cudaStream_t stream);

// y[r] = rmsnorm(x[r]) ⊙ w ⊙ silu(z[r])  (the DeltaNet output norm; w (n) required).
void rmsnorm_gated(const float* x, int64_t ldx, const float* w, const float* z, int64_t ldz,
                   float* y, int64_t ldy, int64_t n_rows, int64_t n, float eps, cudaStream_t stream);

// y[r] = x[r] · scale / max(‖x[r]‖₂, eps)   (ggml_l2_norm, then an optional extra scale).
void l2norm(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_rows, int64_t n,
            float eps, float scale, cudaStream_t stream);

// In-place NEOX RoPE on the first n_rot dims of every head: pairs (i, i + n_rot/2), angle
// pos[t] · freq_base^(−2i/n_rot). x: (n_tokens, n_heads, head_dim), head h of token t at
// x + t·ld_token + h·ld_head. pos: (n_tokens) int32 device.
void rope_neox(float* x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, int64_t ld_token,
               int64_t ld_head, const int32_t* pos, float freq_base, cudaStream_t stream);

// y = silu(g) ⊙ u over n values (y may alias g or u).
void swiglu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream);
// y = a + b (y may alias a or b).
void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
// y = x · s.
void scale(const float* x, float s, float* y, int64_t n, cudaStream_t stream);
// y[t] += sigmoid(gate_logit[t]) · s[t] for t < n_tokens; y, s: (n_tokens, n); gate_logit
// (n_tokens) — the shared-expert gate.
void sigmoid_gate_add(float* y, const float* s, const float* gate_logit, int64_t n_tokens,
                      int64_t n, cudaStream_t stream);

// Router: probabilities = softmax(logits[t]) over n_expert, the k largest (ties → lower id) with
// their probabilities, divided by their sum (clamped ≥ 2^-14) when `renormalize`, then times
// `scale` unless it is 0 or 1. logits (n_tokens, n_expert); ids, weights (n_tokens, k).
// n_expert ≤ 4096, k ≤ min(n_expert, 64).
void route_topk(const float* logits, int64_t n_tokens, int n_expert, int k, int32_t* ids,
                float* weights, bool renormalize, float scale, cudaStream_t stream);

// out[r] = index of the largest x[r][i] (first on ties; NaN never wins; -1 for an all-NaN row).
// x (n_rows, n), row stride ld.
void argmax_rows(const float* x, int64_t ld, int64_t n_rows, int64_t n, int32_t* out,
                 cudaStream_t stream);

// KV cache append: cache rows [p0, p0 + n_tokens) ← src rows, converted to the cache type
// (F32 or F16 here, round to nearest even like ggml; the other KV types go to kv_store_quantized
// with n_rot, rot_scale). src (n_tokens, row_elems) with stride ld_src; cache (n_ctx, row_elems)
// contiguous (a quantized row: row_elems/32 blocks).
void kv_store(const float* src, int64_t ld_src, void* cache, GgmlType cache_type, int64_t p0,
              int64_t n_tokens, int64_t row_elems, cudaStream_t stream, int n_rot = 0, float rot_scale = 1.f);
// The other KV types (BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; kv_store.cu), which kv_store
// hands on: each token row is rotated in chunks of n_rot values (0: none; a power of two ≥ 64
// dividing row_elems, every value × rot_scale = 1/√n_rot first, as kernels/cpu/hadamard.cpp) and
// quantized as kernels/cpu's quantize_row_cpu does, byte for byte. Rows of ≤ 12288 values.
void kv_store_quantized(const float* src, int64_t ld_src, void* cache, GgmlType cache_type, int64_t p0,
                        int64_t n_tokens, int64_t row_elems, int n_rot, float rot_scale, cudaStream_t stream);

}  // namespace ferry::cuda
