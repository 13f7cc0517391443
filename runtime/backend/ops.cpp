#include "runtime/backend/ops.hpp"

#include "runtime/backend/gdn_ops.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

bool kv_cache_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: return true;
    default: return false;
  }
}

const char* kv_cache_type_names() { return "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"; }

std::unique_ptr<GdnOps> Ops::make_gdn_ops() {
  fail(ErrorKind::unsupported,
       "the '{}' backend has no Gated DeltaNet ops (qwen35moe/qwen3next run on the cpu and cuda "
       "backends)",
       name());
}

void Ops::matmul_multi(std::span<const MatmulTarget> targets, const float* x, int64_t ldx, int64_t n) {
  for (const MatmulTarget& t : targets) {
    matmul(t.w, x, ldx, n, t.y, t.ldy);
    if (!t.up.data) continue;
    matmul(t.up, x, ldx, n, t.up_y, t.ldy);
    swiglu(t.y, t.up_y, n, t.w.rows, t.y);
  }
}

void Ops::matmul_multi_route(std::span<const MatmulTarget> targets, const float* x, int64_t ldx, int64_t n,
                             const RouteArgs& r) {
  matmul_multi(targets, x, ldx, n);
  moe_route(r.logits, n, r.n_expert, r.top_k, r.renormalize, r.scale, r.ids, r.weights);
}

void Ops::residual_norm(float* x, int64_t n_tokens, int64_t n, const ResidualNorm& r) {
  if (r.b) sigmoid_gated_add(r.b, r.gate_logit, n_tokens, n, r.a);
  add(x, r.a, n_tokens * n, x);
  if (r.w) rmsnorm(x, r.w, n_tokens, n, n, r.eps, r.h);
}

void Ops::attention_prep(const AttentionPrep& p) {
  const int64_t hd = p.kv.head_dim_k, n_kv = p.kv.n_head_kv;
  rmsnorm(p.q, p.q_norm, p.n_tokens * p.n_head, hd, p.q_head_stride, p.eps, p.q);
  rmsnorm(p.k, p.k_norm, p.n_tokens * n_kv, hd, hd, p.eps, p.k);
  rope_neox(p.q, p.n_tokens, p.n_head, p.n_head * p.q_head_stride, p.q_head_stride, p.n_rot, p.pos, p.freq_base);
  rope_neox(p.k, p.n_tokens, n_kv, n_kv * hd, hd, p.n_rot, p.pos, p.freq_base);
  kv_store(p.kv, p.pos0, p.n_tokens, p.k, p.v);
}

void GdnOps::conv_l2_gates(const GdnPrep& p, int64_t n_tokens) {
  if (p.b)
    gates(p.b, p.ldb, p.a, p.lda, p.dt_bias, p.ssm_a, p.beta, p.g, p.ld_out, n_tokens, p.n_heads);
  conv_silu(p.x, p.ldx, p.w, p.kernel, p.state, p.y, p.ldy, n_tokens, p.n_ch);
  l2_norm_heads(p.y, p.ldy, n_tokens, p.n_l2_heads, p.dim, p.eps);
}

void GdnOps::delta_rule_gated_norm(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens,
                                   float scale, float* state, float* out, int64_t ldo, const float* z, int64_t ldz,
                                   const float* w, float eps) {
  delta_rule(shape, in, n_tokens, scale, state, out, ldo);
  gated_rms_norm(out, ldo, z, ldz, w, out, ldo, n_tokens, shape.n_v_heads, shape.head_dim, eps);
}

}  // namespace ferry
