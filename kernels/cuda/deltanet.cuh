#pragma once
// Gated DeltaNet (qwen35moe / qwen3next linear-attention layers) on the GPU. Same math, shapes and
// state layout as the CPU kernels in kernels/cpu/gdn.hpp (the reference the GPU tests use):
// per value head h with key head kh, per token t, S (S×S, [key i][value j]):
//   S ← e^{g_t}·S;   δ = β_t (v_t − Sᵀk_t);   S ← S + k_t δᵀ;   o_t = scale · Sᵀq_t
// All buffers are device pointers, F32; calls are asynchronous on `stream`.
#include <cuda_runtime_api.h>

#include <cstddef>
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
  // Optional, gdn_delta_rule only: the gated RMSNorm of each head's output in the same launch,
  // in place: out ← rmsnorm(out)·norm_w ⊙ silu(z) per head vector (rmsnorm_gated_heads' arithmetic),
  // run by the last of the head's blocks to finish (the last-block pattern). counters: H_v zeroed
  // unsigned of device memory, set back to 0 by the launch; launches sharing them must not overlap.
  const float* z = nullptr;  // (n_tokens, H_v, S), token stride ldz
  int64_t ldz = 0;
  const float* norm_w = nullptr;  // (S)
  float eps = 0.f;
  unsigned* counters = nullptr;
};

// Two forms of the delta rule, as on the CPU (kernels/cpu/gdn.hpp), agreeing to float rounding.
// The caller picks one (runtime/backend/gdn_cuda.cpp: chunked from kGdnChunkedMinTokens tokens).
//
// gdn_delta_rule: token by token (decode; short batches). A block owns 32 value columns of one
// head; its 4 warps split the key rows, and each lane keeps its S/4 state entries in registers
// across all tokens of the call, so the state is read and written once per call, not once per
// token. Needs no scratch, so decode steps can be recorded into CUDA graphs.
void gdn_delta_rule(const GdnArgs& a, cudaStream_t stream);

// gdn_delta_rule_chunked: prefill, in chunks of 64 tokens (the WY / UT-transform form of
// kernels/cpu/gdn_core_impl.hpp chunk()). The token-by-token kernel walks the tokens one after
// another on H_v·S/32 blocks; here everything that does not depend on the state (decays, K·Kᵀ,
// Q·Kᵀ, T = (I + L)⁻¹, T·diag(β)·V, T·diag(−βΓ)·K) runs for all chunks of all heads in parallel
// (one kernel), and the sequential pass over the chunks (a second kernel, H_v·S/32 blocks) is
// small GEMMs, 64 tokens at a time. Calls longer than kGdnChunkedMaxTokens run as several passes.
//   scratch: device memory of gdn_chunked_scratch_bytes(a) bytes, overwritten: per (head, chunk)
//            U, W (64, S), P (64, 64), Γ and the decays to the chunk's end (64 each), floats.
//            A scratch sized for n tokens serves any call of up to n tokens.
size_t gdn_chunked_scratch_bytes(const GdnArgs& a);
void gdn_delta_rule_chunked(const GdnArgs& a, float* scratch, cudaStream_t stream);

// Batches of this many tokens or more take the chunked form. Unmeasured on a GPU (none was
// available when it was written): the chunked form's point is the parallelism over chunks, which
// a single chunk does not have, so one chunk is where it can start to pay; measure with
// bench/gpu_kernels.cpp and move it. The recurrent kernel stays the decode path regardless.
inline constexpr int64_t kGdnChunkedMinTokens = 64;
// Tokens per pass of gdn_delta_rule_chunked: bounds the scratch (at 32 heads of 128:
// ≈ 1.3 KB per token and head, 84 MB for a pass of 2048 tokens).
inline constexpr int64_t kGdnChunkedMaxTokens = 2048;

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

// One decode token's small ops in one launch (deltanet_step.cu), bit for bit the three calls
//   gdn_gates(b, a, dt_bias, ssm_a → beta, g; n_heads)
//   gdn_conv_silu(x, w, kernel, state → y; n_ch)
//   l2norm_heads(y, the first n_l2_heads head vectors of dim, eps)
// for n_tokens = 1. n_ch must be a multiple of dim (the conv channels are whole heads).
struct GdnDecodePrep {
  const float* x = nullptr;
  const float* w = nullptr;
  int kernel = 0;
  float* state = nullptr;
  float* y = nullptr;
  int64_t n_ch = 0;
  int n_l2_heads = 0;
  int dim = 0;
  float eps = 0.f;
  const float* b = nullptr;
  const float* a = nullptr;
  const float* dt_bias = nullptr;
  const float* ssm_a = nullptr;
  float* beta = nullptr;
  float* g = nullptr;
  int n_heads = 0;
};
void gdn_decode_prep(const GdnDecodePrep& p, cudaStream_t stream);

// out = rmsnorm(o)·w ⊙ silu(z) per head vector of dim; o, z, out (n_tokens, n_heads, dim) with
// token strides ldo, ldz, ldout; out may alias o.
void rmsnorm_gated_heads(const float* o, int64_t ldo, const float* z, int64_t ldz, const float* w,
                         float* out, int64_t ldout, int64_t n_tokens, int n_heads, int dim,
                         float eps, cudaStream_t stream);

}  // namespace ferry::cuda
