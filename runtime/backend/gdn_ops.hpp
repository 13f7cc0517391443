#pragma once
// The Gated DeltaNet ops of the hybrid models (qwen35moe, qwen3next), in the style of Ops
// (runtime/backend/ops.hpp): pointer based, buffers in the backend's memory, owned by the caller,
// executed in call order with the backend's other ops, ggml CPU semantics.
//
// A backend hands out its implementation through Ops::make_gdn_ops() (cpu: gdn_cpu.cpp, cuda:
// gdn_cuda.cpp); a backend without one fails there with ErrorKind::unsupported. They are a
// separate object rather than more Ops methods because the CUDA one owns scratch (the chunked
// delta rule's) that only the hybrid models need.
#include <cstdint>
#include <memory>

#include "kernels/cpu/gdn.hpp"

namespace ferry {

// conv_l2_gates' operands (the calls it stands for name them).
struct GdnPrep {
  const float* x = nullptr;
  int64_t ldx = 0;
  const float* w = nullptr;
  int32_t kernel = 0;
  float* state = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t n_ch = 0;
  int32_t n_l2_heads = 0;
  int32_t dim = 0;
  float eps = 0.0f;
  const float* b = nullptr;  // nullptr: no gates (a caller that computes them apart)
  int64_t ldb = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* dt_bias = nullptr;
  const float* ssm_a = nullptr;
  float* beta = nullptr;
  float* g = nullptr;
  int64_t ld_out = 0;
  int32_t n_heads = 0;
};

class GdnOps {
 public:
  virtual ~GdnOps() = default;

  // Causal depthwise conv (kernel K, no bias) + SiLU with a rolling state (ggml_ssm_conv, silu).
  //   x: (n_tokens, n_ch) stride ldx;  w: (n_ch, K) F32;  state: (K−1, n_ch) in/out;
  //   y: (n_tokens, n_ch) stride ldy, not aliasing x.
  virtual void conv_silu(const float* x, int64_t ldx, const float* w, int32_t kernel, float* state,
                         float* y, int64_t ldy, int64_t n_tokens, int64_t n_ch) = 0;

  // In place: each head vector of x (n_tokens, n_heads, dim), stride ld, ← x / max(‖x‖, eps).
  virtual void l2_norm_heads(float* x, int64_t ld, int64_t n_tokens, int32_t n_heads, int32_t dim,
                             float eps) = 0;

  // beta = sigmoid(b); g = ssm_a ⊙ softplus(a + dt_bias). b, a: (n_tokens, n_heads) strides
  // ldb, lda; dt_bias, ssm_a: (n_heads); beta, g: (n_tokens, n_heads) stride ld_out.
  virtual void gates(const float* b, int64_t ldb, const float* a, int64_t lda, const float* dt_bias,
                     const float* ssm_a, float* beta, float* g, int64_t ld_out, int64_t n_tokens,
                     int32_t n_heads) = 0;

  // The gated delta rule from `state` (H_v, S, S) key-major, left updated; out (n_tokens, H_v, S)
  // stride ldo. Shapes and layouts as kernels/cpu/gdn.hpp gdn_delta_rule.
  virtual void delta_rule(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens,
                          float scale, float* state, float* out, int64_t ldo) = 0;

  // A decode step's small ops as one call: with b, gates(b, ldb, a, lda, dt_bias, ssm_a, beta, g,
  // ld_out, n_tokens, n_heads); then conv_silu(x, ldx, w, kernel, state, y, ldy, n_tokens, n_ch);
  // then l2_norm_heads(y, ldy, n_tokens, n_l2_heads, dim, eps) — the default runs exactly these
  // (runtime/backend/ops.cpp); CUDA fuses one token into one launch.
  virtual void conv_l2_gates(const GdnPrep& p, int64_t n_tokens);

  // The delta rule, then its output's gated norm in place: delta_rule(shape, in, n_tokens, scale,
  // state, out, ldo); gated_rms_norm(out, ldo, z, ldz, w, out, ldo, n_tokens, H_v, S, eps) — the
  // default runs exactly these (runtime/backend/ops.cpp); CUDA decode runs them as one launch.
  virtual void delta_rule_gated_norm(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens,
                                     float scale, float* state, float* out, int64_t ldo, const float* z,
                                     int64_t ldz, const float* w, float eps);

  // out = rmsnorm(o)·w ⊙ silu(z) per head vector of dim. o, z, out: (n_tokens, n_heads, dim)
  // with strides ldo, ldz, ldout; out may alias o. w: (dim) F32.
  virtual void gated_rms_norm(const float* o, int64_t ldo, const float* z, int64_t ldz,
                              const float* w, float* out, int64_t ldout, int64_t n_tokens,
                              int32_t n_heads, int32_t dim, float eps) = 0;
};

// The CPU implementation (host buffers; SiLU rounded as ggml's): what CpuOps::make_gdn_ops()
// returns. long_batches: the delta rule's form for prefill batches (kernels/cpu/gdn.hpp).
std::unique_ptr<GdnOps> make_cpu_gdn_ops(cpu::GdnPrefill long_batches);

}  // namespace ferry
