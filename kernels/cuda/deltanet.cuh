#pragma once
// Gated DeltaNet (qwen35moe / qwen3next linear-attention layers) on the GPU. Same math, shapes and
// state layout as the CPU kernels in kernels/cpu/gdn.hpp (the reference the GPU tests use):
// per value head h with key head kh, per token t, S (S×S, [key i][value j]):
//   S ← e^{g_t}·S;   δ = β_t (v_t − Sᵀk_t);   S ← S + k_t δᵀ;   o_t = scale · Sᵀq_t
// All buffers are device pointers, F32; calls are asynchronous on `stream`.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ferry::cuda {

struct GdnArgs {
  int n_k_heads = 0;         // H_k
  int n_v_heads = 0;         // H_v, a multiple of H_k
  int head_dim = 0;          // S ∈ {16, 32, 64, 128}
  bool key_head_tiled = true;  // kh = h mod H_k (qwen35moe); false: kh = h / (H_v/H_k) (qwen3next)
  const float* q = nullptr;  // (n_tokens, H_k, S), token stride ldq; L2-normalised
  int64_t ldq = 0;
  const float* k = nullptr;  // (n_tokens, H_k, S), token stride ldk; L2-normalised
  int64_t ldk = 0;
  const float* v = nullptr;  // (n_tokens, H_v, S), token stride ldv
  int64_t ldv = 0;
  const float* g = nullptr;     // (n_tokens, H_v) log decay
  const float* beta = nullptr;  // (n_tokens, H_v)
  float* state = nullptr;       // (H_v, S, S) in/out
  float* out = nullptr;         // (n_tokens, H_v, S), token stride ldo
  int64_t ldo = 0;
  int64_t n_tokens = 0;
  float scale = 1.f;
};

// The delta rule token by token (decode and prefill). A block owns 32 value columns of one head;
// its 4 warps split the key rows, and each lane keeps its S/4 state entries in registers across
// all tokens of the call, so the state is read and written once per call, not once per token.
void gdn_delta_rule(const GdnArgs& a, cudaStream_t stream);

// Causal depthwise conv (kernel K ≤ 8, no bias) + SiLU with a rolling state (ggml_ssm_conv):
//   y[t][c] = silu(Σ_{k<K} w[c][k] · in[t − (K−1) + k][c]), in[τ < 0] from the state.
//   x (n_tokens, n_ch) stride ldx; w (n_ch, K); state (K−1, n_ch) in/out; y stride ldy (≠ x).
void gdn_conv_silu(const float* x, int64_t ldx, const float* w, int kernel, float* state, float* y,
                   int64_t ldy, int64_t n_tokens, int64_t n_ch, cudaStream_t stream);

// beta = sigmoid(b_raw); g = ssm_a[h] · softplus(a_raw + dt_bias[h]) (softplus(x) = x for x > 20,
// as ggml). b_raw, a_raw (n_tokens, n_heads) token strides ldb, lda; beta, g (n_tokens, n_heads)
// token stride ld_out.
void gdn_gates(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
               const float* dt_bias, const float* ssm_a, float* beta, float* g, int64_t ld_out,
               int64_t n_tokens, int n_heads, cudaStream_t stream);

// In place, per head vector: x ← x / max(‖x‖₂, eps). x (n_tokens, n_heads, dim), token stride ld.
void l2norm_heads(float* x, int64_t ld, int64_t n_tokens, int n_heads, int dim, float eps,
                  cudaStream_t stream);

// out = rmsnorm(o)·w ⊙ silu(z) per head vector of dim; o, z, out (n_tokens, n_heads, dim) with
// token strides ldo, ldz, ldout; out may alias o.
void rmsnorm_gated_heads(const float* o, int64_t ldo, const float* z, int64_t ldz, const float* w,
                         float* out, int64_t ldout, int64_t n_tokens, int n_heads, int dim,
                         float eps, cudaStream_t stream);

}  // namespace ferry::cuda
