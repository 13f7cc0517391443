// The Gated DeltaNet token mixer of the hybrid models, written against Ops + GdnOps. Graph as
// llama.cpp's build_layer_attn_linear (qwen35moe.cpp / qwen3next.cpp, delta-net-base.cpp):
//   qkv = W_qkv·h;  z = W_gate·h;  β = sigmoid(W_β·h);  g = ssm_a ⊙ softplus(W_α·h + dt_bias)
//   c = silu(causal_conv(qkv; conv state));  q, k, v = split(c);  q, k ← l2norm per head
//   o = delta_rule(q, k, v, g, β; matrix state), q scaled by 1/√S
//   out = W_out · (rmsnorm(o)·ssm_norm ⊙ silu(z))
#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/model/qwen35moe_internal.hpp"

namespace ferry::hybrid {

GdnDims gdn_dims(const ModelConfig& c) {
  const std::string_view a = arch_name(c.arch);
  auto need = [&](bool ok, ErrorKind kind, std::string_view what) {
    if (!ok) fail(kind, "{} model {}: {}", a, c.file, what);
  };
  GdnDims d;
  d.n_k_heads = c.ssm_group_count;
  d.n_v_heads = c.ssm_time_step_rank;
  d.head_dim = c.ssm_state_size;
  d.conv_kernel = c.ssm_conv_kernel;
  need(d.n_k_heads > 0 && d.n_v_heads > 0 && d.head_dim > 0,
       ErrorKind::format,
       fmt::format("ssm.group_count {}, ssm.time_step_rank {}, ssm.state_size {} must be > 0",
                   d.n_k_heads, d.n_v_heads, d.head_dim));
  need(d.n_v_heads % d.n_k_heads == 0, ErrorKind::format,
       fmt::format("ssm.time_step_rank {} is not a multiple of ssm.group_count {}", d.n_v_heads,
                   d.n_k_heads));
  need(int64_t{c.ssm_inner_size} == d.value_dim(), ErrorKind::unsupported,
       fmt::format("ssm.inner_size {} != state_size {} × time_step_rank {} (value heads of a "
                   "different size than key heads)",
                   c.ssm_inner_size, d.head_dim, d.n_v_heads));
  need(d.conv_kernel >= 1 && d.conv_kernel <= 16, ErrorKind::unsupported,
       fmt::format("ssm.conv_kernel {} outside [1, 16]", d.conv_kernel));
  need(d.head_dim % 16 == 0 && d.head_dim <= 1024, ErrorKind::unsupported,
       fmt::format("ssm.state_size {} is not a multiple of 16 in [16, 1024]", d.head_dim));
  return d;
}

void deltanet_forward(const GdnContext& ctx, const Layer& L, int32_t il, State& st, int64_t nb) {
  Ops& ops = ctx.ops;
  GdnOps& gdn = ctx.gdn;
  const GdnDims& d = ctx.dims;
  const DeltaNetWeights& W = L.gdn;
  const int64_t E = ctx.cfg.n_embd, C = d.conv_dim(), V = d.value_dim(), Hv = d.n_v_heads;
  const int32_t S = d.head_dim;
  const float eps = ctx.cfg.rms_eps;
  auto debug = [&](std::string_view name, const float* p, int64_t rows, int64_t cols) {
    if (ctx.debug) ctx.debug(name, il, p, rows, cols);
  };

  float* h = st.h.f32();
  float* qkv = st.qkv.f32();
  float* z = st.z.f32();
  // The input projections all read h: one multi-matmul (one launch per weight type in decode).
  float* ba = st.ba.f32();
  if (ctx.gates == GateLayout::split) {
    const MatmulTarget proj[] = {{W.qkv, qkv, C}, {W.z, z, V}, {W.beta, ba, 2 * Hv}, {W.alpha, ba + Hv, 2 * Hv}};
    ops.matmul_multi(proj, h, E, nb);
  } else {
    const MatmulTarget proj[] = {{W.qkv, qkv, C}, {W.z, z, V}, {W.ba, ba, 2 * Hv}};
    ops.matmul_multi(proj, h, E, nb);
  }
  debug("linear_attn_qkv_mixed", qkv, nb, C);
  debug("z", z, nb, V);

  // Gates, conv + SiLU and the q/k L2 norm as one call (one launch in CUDA decode); apart when a
  // debug hook reads the conv output before its norm.
  float* conv = st.conv.f32();
  GdnPrep prep;
  prep.x = qkv;
  prep.ldx = C;
  prep.w = W.conv1d;
  prep.kernel = d.conv_kernel;
  prep.state = st.conv_state[static_cast<size_t>(il)].f32();
  prep.y = conv;
  prep.ldy = C;
  prep.n_ch = C;
  prep.n_l2_heads = 2 * d.n_k_heads;  // q and k heads are the first 2·H_k head vectors of a row
  prep.dim = S;
  prep.eps = eps;
  if (ctx.gates == GateLayout::split) {
    prep.b = ba;
    prep.ldb = 2 * Hv;
    prep.a = ba + Hv;
    prep.lda = 2 * Hv;
    prep.dt_bias = W.dt_bias;
    prep.ssm_a = W.ssm_a;
    prep.beta = st.beta.f32();
    prep.g = st.g.f32();
    prep.ld_out = Hv;
    prep.n_heads = d.n_v_heads;
  } else {
    gates_grouped(ctx, L, st, nb);
  }
  if (!ctx.debug) {
    gdn.conv_l2_gates(prep, nb);
  } else {
    if (prep.b)
      gdn.gates(prep.b, prep.ldb, prep.a, prep.lda, prep.dt_bias, prep.ssm_a, prep.beta, prep.g, prep.ld_out, nb,
                prep.n_heads);
    debug("beta_sigmoid", st.beta.f32(), nb, Hv);
    debug("gate", st.g.f32(), nb, Hv);
    gdn.conv_silu(qkv, C, W.conv1d, d.conv_kernel, prep.state, conv, C, nb, C);
    debug("conv_output_silu", conv, nb, C);
    gdn.l2_norm_heads(conv, C, nb, prep.n_l2_heads, S, eps);
  }

  cpu::GdnShape shape{d.n_k_heads, d.n_v_heads, S, ctx.key_map};
  cpu::GdnInputs in;
  in.q = conv;
  in.ldq = C;
  in.k = conv + d.key_dim();
  in.ldk = C;
  in.v = conv + 2 * d.key_dim();
  in.ldv = C;
  in.g = st.g.f32();
  in.beta = st.beta.f32();
  float* core = st.core.f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(S));
  float* state = st.ssm_state[static_cast<size_t>(il)].f32();
  // The rule and its gated norm as one call (one launch in CUDA decode); apart when a debug hook
  // reads the rule's output before the norm.
  if (!ctx.debug) {
    gdn.delta_rule_gated_norm(shape, in, nb, scale, state, core, V, z, V, W.norm, eps);
  } else {
    gdn.delta_rule(shape, in, nb, scale, state, core, V);
    debug("attn_output", core, nb, V);
    gdn.gated_rms_norm(core, V, z, V, W.norm, core, V, nb, d.n_v_heads, S, eps);
  }
  debug("final_output", core, nb, V);
  ops.matmul(W.out, core, V, nb, st.mix_out.f32(), E);
  debug("linear_attn_out", st.mix_out.f32(), nb, E);
}

}  // namespace ferry::hybrid
