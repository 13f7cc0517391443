#pragma once
// Gated DeltaNet (the linear-attention layer of qwen35moe / qwen3next) on the CPU: the causal
// depthwise conv with its rolling state, the per-head norms, the gate math, and the gated delta
// rule itself in two forms that agree to float rounding:
//   - recurrent: token by token (decode; short batches);
//   - chunked:   chunks of 64 tokens in the WY / UT-transform form of the Gated DeltaNet paper
//                (flash-linear-attention's chunk_gated_delta_rule), for long prompts.
// Math, per value head h with key head kh = key_head(h), for each token t (S is a 128×128 matrix
// indexed [key i][value j]):
//   S ← e^{g_t} · S;   δ = β_t (v_t − Sᵀ k_t);   S ← S + k_t δᵀ;   o_t = scale · Sᵀ q_t
// with q, k already L2-normalised and scale = 1/√head_dim (llama.cpp scales q; same result).
// Everything is F32 and pointer-based: buffers are owned by the caller (the model / session).
// Heavy entry points run in parallel over heads with oneTBB and respect the caller's task_arena.
#include <cstdint>

namespace ferry::cpu {

// How a value head finds its key head when there are more value heads than key heads.
enum class GdnKeyHeadMap : uint8_t {
  tiled,    // key head = h mod n_k_heads          (qwen35moe; ggml broadcast / torch .repeat)
  grouped,  // key head = h / (n_v_heads/n_k_heads) (qwen3next; torch .repeat_interleave)
};

struct GdnShape {
  int32_t n_k_heads = 0;  // H_k (ssm.group_count)
  int32_t n_v_heads = 0;  // H_v (ssm.time_step_rank), a multiple of H_k
  int32_t head_dim = 0;   // S: key and value head size (ssm.state_size); both models use Sk == Sv
  GdnKeyHeadMap key_map = GdnKeyHeadMap::tiled;

  int32_t key_head(int32_t h) const {
    return key_map == GdnKeyHeadMap::tiled ? h % n_k_heads : h / (n_v_heads / n_k_heads);
  }
  // Floats of the recurrent matrix state of one layer: (H_v, S, S).
  int64_t state_floats() const { return int64_t(n_v_heads) * head_dim * head_dim; }
};

// Throws ErrorKind::invalid_arg unless every dimension is positive and H_v is a multiple of H_k.
void gdn_check_shape(const GdnShape& shape);

// Per-token inputs of the delta rule. Rows are tokens; each token's heads are contiguous
// head_dim-sized vectors, so the three pointers can be views into one conv output row.
struct GdnInputs {
  const float* q = nullptr;     // (n_tokens, H_k, S), token stride ldq floats; L2-normalised
  int64_t ldq = 0;
  const float* k = nullptr;     // (n_tokens, H_k, S), token stride ldk; L2-normalised
  int64_t ldk = 0;
  const float* v = nullptr;     // (n_tokens, H_v, S), token stride ldv
  int64_t ldv = 0;
  const float* g = nullptr;     // (n_tokens, H_v) log decay (≤ 0), contiguous
  const float* beta = nullptr;  // (n_tokens, H_v) write strength in (0, 1), contiguous
};

// The gated delta rule over n_tokens tokens, continuing from `state` and leaving the final state
// there.
//   state: (H_v, S, S), state[h][i][j] = S_h[key i][value j]; in/out. (Key-major so that every
//          inner loop of both forms is a contiguous axpy over the value dimension.)
//   out:   (n_tokens, H_v, S), token stride ldo floats; must not alias the inputs.
// gdn_delta_rule takes the recurrence for batches shorter than kGdnChunkedMinTokens and the form
// `long_batches` from there. The recurrence's float order is llama.cpp's own (its CPU op runs the
// recurrence for prompts too), so CPU logits with it are bit-identical to llama.cpp's; it costs ~2x
// the chunked form's time on the delta rule itself (35B-A3B shape: 0.07-0.11 vs 0.04 ms per token
// and layer), a few percent of a prompt token's work next to the experts; both are linear in the
// prompt length (docs/qwen35moe.md). The chunked form agrees to float rounding. The caller
// chooses (CpuOpsOptions / CudaOpsOptions::gdn_prefill, `--gdn-prefill`; docs/options.md).
enum class GdnPrefill { chunked, recurrent };
void gdn_delta_rule(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens, float scale,
                    float* state, float* out, int64_t ldo, GdnPrefill long_batches);
void gdn_delta_rule_recurrent(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens,
                              float scale, float* state, float* out, int64_t ldo);
void gdn_delta_rule_chunked(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens,
                            float scale, float* state, float* out, int64_t ldo);

inline constexpr int kGdnChunk = 64;             // tokens per chunk of the chunked form
inline constexpr int64_t kGdnChunkedMinTokens = 16;  // gdn_delta_rule: chunked from this many tokens

// y[i] = silu(x[i]) over one row; lets a caller round SiLU exactly as a given llama.cpp build does
// (runtime/backend/cpu_ops_math.hpp). nullptr: x / (1 + exp(−x)) with libm's exp. Rows passed
// start at a multiple of 16 values from the start of the tensor row.
using SiluRowFn = void (*)(const float* x, float* y, int64_t n);

// Causal depthwise conv1d (kernel K, no bias) followed by SiLU, with a rolling state holding the
// last K−1 inputs of every channel (ggml_ssm_conv + ggml_silu):
//   y[t][c] = silu(Σ_{k<K} w[c][k] · in[t − (K−1) + k][c]),  in[τ < 0] taken from the state,
//   summed from the oldest tap, each product rounded (as ggml_ssm_conv).
//   x:     (n_tokens, n_ch), token stride ldx
//   w:     (n_ch, K), the GGUF ssm_conv1d tensor {K, n_ch}
//   state: (K−1, n_ch), oldest input first; updated in place to the last K−1 inputs
//   y:     (n_tokens, n_ch), token stride ldy; must not alias x
void gdn_conv_silu(const float* x, int64_t ldx, const float* w, int32_t kernel, float* state,
                   float* y, int64_t ldy, int64_t n_tokens, int64_t n_ch, SiluRowFn silu = nullptr);

// In place, per head vector of length dim: x ← x / √(‖x‖₂² + eps), computed as llama.cpp's graph
// does (rms_norm with eps/dim, then a scale by 1/√dim).
//   x: (n_tokens, n_heads, dim), token stride ld
void gdn_l2_norm_heads(float* x, int64_t ld, int64_t n_tokens, int32_t n_heads, int32_t dim,
                       float eps);

// Gated RMSNorm of the delta-rule output, per head vector of length dim:
//   out = (o / √(mean(o²) + eps)) · weight ⊙ silu(z)
//   o:      (n_tokens, n_heads, dim), token stride ldo
//   z:      (n_tokens, n_heads, dim), token stride ldz (the attn_gate projection)
//   weight: (dim), ssm_norm
//   out:    (n_tokens, n_heads, dim), token stride ldout; may alias o
void gdn_gated_rms_norm(const float* o, int64_t ldo, const float* z, int64_t ldz,
                        const float* weight, float* out, int64_t ldout, int64_t n_tokens,
                        int32_t n_heads, int32_t dim, float eps, SiluRowFn silu = nullptr);

// Gates from the two small projections:
//   beta[t][h] = sigmoid(b_raw[t][h])
//   g[t][h]    = ssm_a[h] · softplus(a_raw[t][h] + dt_bias[h])   (ssm_a = −exp(A_log) < 0)
//   b_raw, a_raw: (n_tokens, n_heads), token strides ldb, lda
//   dt_bias, ssm_a: (n_heads)
//   beta, g:      (n_tokens, n_heads), token stride ld_out
// (qwen3next interleaves b and a per key-head group: call once per group with offset pointers.)
void gdn_gates(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
               const float* dt_bias, const float* ssm_a, float* beta, float* g, int64_t ld_out,
               int64_t n_tokens, int32_t n_heads);

}  // namespace ferry::cpu
