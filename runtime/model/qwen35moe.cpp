// qwen35moe forward (and qwen3next's, see qwen3next.cpp), written once against Ops + GdnOps.
// Graph as llama.cpp's llama_model_qwen35moe::graph:
//   x = embed(tokens)
//   per block: h = rmsnorm(x)·attn_norm
//              x += DeltaNet(h)                      (qwen35moe_deltanet.cpp), or
//              x += wo·(attention(q, cache) ⊙ sigmoid(gate)) with [q | gate] = wq·h per head,
//                   q, k per-head RMSNorm, NEOX RoPE on the first n_rot dims
//              h = rmsnorm(x)·post_attention_norm
//              x += MoE(h) + sigmoid(w_sg·h) · down_sh(silu(gate_sh·h) ⊙ up_sh·h)
//   logits = output · rmsnorm(x)·output_norm   (output falls back to token_embd)
// Blocks past block_count − nextn_predict_layers (the MTP head of Qwen3.6 files) are not run.
#include "runtime/model/qwen35moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/qwen35moe_internal.hpp"
#include "runtime/model/weights.hpp"

namespace ferry {
namespace hybrid {

State::State(Ops& o, const ModelConfig& c, const GdnDims& d, const StateOptions& so)
    : ModelState(so.n_ctx, so.n_batch), ops(o), kv(o, c, so.n_ctx, so.type_k, so.type_v) {
  auto f32 = [&](int64_t n, size_t& counter) {
    DeviceBuffer b = ops.alloc(static_cast<size_t>(n) * sizeof(float));
    counter += b.bytes();
    return b;
  };
  conv_state.resize(c.layer_kind.size());
  ssm_state.resize(c.layer_kind.size());
  for (size_t il = 0; il < c.layer_kind.size(); ++il) {
    if (c.layer_kind[il] != LayerKind::deltanet) continue;
    conv_state[il] = f32(int64_t{d.conv_kernel - 1} * d.conv_dim() + 1, recurrent_bytes);
    ssm_state[il] = f32(int64_t{d.n_v_heads} * d.head_dim * d.head_dim, recurrent_bytes);
  }
  ModelState::reset();
  reset();

  const int64_t B = so.n_batch, E = c.n_embd;
  const bool has_attn = c.n_attention_layers() > 0, has_gdn = c.n_attention_layers() < c.n_layer;
  const int64_t nq = has_attn ? int64_t{c.n_head} * c.head_dim_k : 0;
  const int64_t nk = has_attn ? int64_t{c.n_head_kv} * c.head_dim_k : 0;
  const int64_t nv = has_attn ? int64_t{c.n_head_kv} * c.head_dim_v : 0;
  const int64_t na = has_attn ? int64_t{c.n_head} * c.head_dim_v : 0;
  const int64_t C = has_gdn ? d.conv_dim() : 0, V = has_gdn ? d.value_dim() : 0;
  const int64_t Hv = has_gdn ? d.n_v_heads : 0;
  auto ws = [&](int64_t n) { return f32(std::max<int64_t>(n, 1), ws_bytes); };
  tokens = ws(B);  // int32 and float have the same size
  pos = ws(B);
  x = ws(B * E);
  h = ws(B * E);
  mix_out = ws(B * E);
  qg = ws(B * 2 * nq);
  k = ws(B * nk);
  v = ws(B * nv);
  attn = ws(B * na);
  qkv = ws(B * C);
  conv = ws(B * C);
  z = ws(B * V);
  ba = ws(B * 2 * Hv);
  beta = ws(B * Hv);
  g = ws(B * Hv);
  core = ws(B * V);
  router = ws(B * c.n_expert);
  expert_ids = ws(B * c.n_expert_used);
  expert_w = ws(B * c.n_expert_used);
  moe_out = ws(B * E);
  sh_gate = ws(B * c.n_ff_shexp);
  sh_up = ws(B * c.n_ff_shexp);
  sh_out = ws(B * E);
  sh_logit = ws(B);
  logits_rows = std::min<int64_t>(B, kLogitsRows);
  logits = ws(logits_rows * c.n_vocab);
}

void State::reset() {
  ModelState::reset();
  for (auto* states : {&conv_state, &ssm_state})
    for (DeviceBuffer& b : *states)
      if (b) ops.fill_zero(b.data(), b.bytes());
}

bool State::truncate(int64_t n) {
  if (n < 0 || n > n_past_)
    fail(ErrorKind::invalid_arg, "truncate to {} positions: the state holds {}", n, n_past_);
  if (n == n_past_) return true;
  if (n == 0) {
    reset();
    return true;
  }
  return false;
}

namespace {

class Hybrid final : public Model {
 public:
  Hybrid(const gguf::File& f, ModelConfig cfg, Ops& ops, const MoeExecutorFactory& moe,
         const LoadProgress& progress, GateLayout gates, cpu::GdnKeyHeadMap key_map)
      : Model(std::move(cfg), ops), gates_(gates), key_map_(key_map) {
    const ModelConfig& c = cfg_;
    if (c.n_ff_shexp <= 0)
      fail(ErrorKind::format, "{} model {}: the shared expert width must be > 0", arch_name(c.arch),
           c.file);
    if (c.n_attention_layers() > 0 && c.head_dim_k != c.head_dim_v)
      fail(ErrorKind::unsupported, "{} model {}: attention key length {} != value length {} (the "
           "[q | gate] projection needs equal head sizes, as llama.cpp asserts)", arch_name(c.arch),
           c.file, c.head_dim_k, c.head_dim_v);
    const bool has_gdn = c.n_attention_layers() < c.n_layer;
    if (has_gdn) {
      dims_ = gdn_dims(c);
      gdn_ = ops.make_gdn_ops();
    }
    const WeightLoader w(f);
    const WeightView tok_embd = w.matrix("token_embd.weight", c.n_embd, c.n_vocab);
    tok_embd_ = ops.resident(tok_embd);
    output_norm_ = vec(w, "output_norm.weight", c.n_embd);
    output_ = w.has("output.weight") ? ops.resident_matmul(w.matrix("output.weight", c.n_embd, c.n_vocab))
                                       : ops.resident(tok_embd);
    for (int32_t il = 0; il < c.n_layer; ++il) {
      layers_.push_back(load_layer(f, w, il));
      if (progress) progress(static_cast<float>(il + 1) / static_cast<float>(c.n_layer + 1));
    }
    moe_ = moe(moe_layers_);
    if (!moe_) fail(ErrorKind::internal, "no MoE executor for {}", f.path());
    if (progress) progress(1.0f);
  }

  std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
    if (o.n_batch < 1) fail(ErrorKind::invalid_arg, "batch size {} must be >= 1", o.n_batch);
    return std::make_unique<State>(ops_, cfg_, dims_, o);
  }

  void forward(ModelState& base, std::span<const int32_t> tokens, LogitsMode mode,
               float* logits) override {
    auto* st = dynamic_cast<State*>(&base);
    if (!st) fail(ErrorKind::internal, "{} forward: the state was made by another model", arch_name(cfg_.arch));
    forward_in_batches(*st, cfg_, tokens, mode, logits,
                       [&](std::span<const int32_t> step_tokens) {
                         run_step(static_cast<int64_t>(step_tokens.size()), *moe_,
                                  [&] { step(*st, step_tokens); });
                       },
                       [&](int64_t row, int64_t n_rows, float* out) { emit_logits(*st, row, n_rows, out); });
  }

 private:
  const float* vec(const WeightLoader& w, std::string_view name, int64_t n) {
    return static_cast<const float*>(ops_.resident(w.vector(name, n)).data);
  }
  WeightView mat(const WeightLoader& w, std::string_view name, int64_t cols, int64_t rows) {
    return ops_.resident_matmul(w.matrix(name, cols, rows));
  }

  Layer load_layer(const gguf::File& f, const WeightLoader& w, int32_t il) {
    const ModelConfig& c = cfg_;
    auto name = [&](std::string_view s) { return layer_tensor(il, s); };
    const int64_t E = c.n_embd;
    Layer L;
    L.kind = c.layer_kind[static_cast<size_t>(il)];
    L.attn_norm = vec(w, name("attn_norm"), E);
    L.post_norm = vec(w, name("post_attention_norm"), E);
    if (L.kind == LayerKind::attention) {
      const int64_t hd = c.head_dim_k;
      L.attn.wq = mat(w, name("attn_q"), E, int64_t{c.n_head} * 2 * hd);
      L.attn.wk = mat(w, name("attn_k"), E, int64_t{c.n_head_kv} * hd);
      L.attn.wv = mat(w, name("attn_v"), E, int64_t{c.n_head_kv} * c.head_dim_v);
      L.attn.wo = mat(w, name("attn_output"), int64_t{c.n_head} * c.head_dim_v, E);
      L.attn.q_norm = vec(w, name("attn_q_norm"), hd);
      L.attn.k_norm = vec(w, name("attn_k_norm"), hd);
    } else {
      const GdnDims& d = dims_;
      DeltaNetWeights& g = L.gdn;
      if (!w.has(name("attn_qkv")) && w.has(name("ssm_in"))) {
        if (gates_ != GateLayout::grouped)
          fail(ErrorKind::format, "{}: layer {} has ssm_in but no attn_qkv; only qwen3next files use "
               "the fused legacy projection", f.path(), il);
        split_legacy_ssm_in(w.matrix(name("ssm_in"), E, d.conv_dim() + d.value_dim()), g);
      } else {
        g.qkv = mat(w, name("attn_qkv"), E, d.conv_dim());
        g.z = mat(w, name("attn_gate"), E, d.value_dim());
      }
      if (gates_ == GateLayout::split) {
        g.beta = mat(w, name("ssm_beta"), E, d.n_v_heads);
        g.alpha = mat(w, name("ssm_alpha"), E, d.n_v_heads);
      } else {
        g.ba = mat(w, name("ssm_ba"), E, 2 * int64_t{d.n_v_heads});
      }
      g.out = mat(w, name("ssm_out"), d.value_dim(), E);
      const WeightView conv = w.matrix(name("ssm_conv1d"), d.conv_kernel, d.conv_dim());
      if (conv.type != GgmlType::F32)
        fail(ErrorKind::unsupported, "tensor '{}' in {} has type {}, expected f32",
             name("ssm_conv1d"), f.path(), type_name(conv.type));
      g.conv1d = static_cast<const float*>(ops_.resident(conv).data);
      g.dt_bias = vec(w, fmt::format("blk.{}.ssm_dt.bias", il), d.n_v_heads);
      g.ssm_a = vec(w, fmt::format("blk.{}.ssm_a", il), d.n_v_heads);
      g.norm = vec(w, name("ssm_norm"), d.head_dim);
    }
    L.gate_inp = mat(w, name("ffn_gate_inp"), E, c.n_expert);
    L.gate_inp_shexp = ops_.resident(w.vector(name("ffn_gate_inp_shexp"), E));
    L.gate_shexp = mat(w, name("ffn_gate_shexp"), E, c.n_ff_shexp);
    L.up_shexp = mat(w, name("ffn_up_shexp"), E, c.n_ff_shexp);
    L.down_shexp = mat(w, name("ffn_down_shexp"), c.n_ff_shexp, E);
    MoeLayerWeights m;
    m.gate = w.experts(name("ffn_gate_exps"), E, c.n_ff_exp, c.n_expert);
    m.up = w.experts(name("ffn_up_exps"), E, c.n_ff_exp, c.n_expert);
    m.down = w.experts(name("ffn_down_exps"), c.n_ff_exp, E, c.n_expert);
    m.n_expert = c.n_expert;
    moe_layers_.push_back(m);
    return L;
  }

  // Older qwen3next GGUFs fuse the DeltaNet input projections into ssm_in, whose rows are grouped
  // per key head g: [q_g (S) | k_g (S) | v of heads g·r.. (r·S) | z of the same (r·S)]. Its rows
  // are copied once, regrouped, into attn_qkv order ([all q | all k | all v]) and attn_gate order,
  // so the forward is the same for both layouts (rows are whole quant blocks: a byte copy).
  void split_legacy_ssm_in(const WeightView& in, DeltaNetWeights& g) {
    const GdnDims& d = dims_;
    const int64_t S = d.head_dim, r = d.n_v_heads / d.n_k_heads, group = 2 * S + 2 * r * S;
    const size_t rb = static_cast<size_t>(row_bytes(in.type, static_cast<uint64_t>(in.cols)));
    const auto* src = static_cast<const uint8_t*>(in.data);
    std::vector<uint8_t> qkv(static_cast<size_t>(d.conv_dim()) * rb), z(static_cast<size_t>(d.value_dim()) * rb);
    auto copy = [&](std::vector<uint8_t>& dst, int64_t dst_row, int64_t src_row, int64_t n_rows) {
      std::copy_n(src + static_cast<size_t>(src_row) * rb, static_cast<size_t>(n_rows) * rb,
                  dst.data() + static_cast<size_t>(dst_row) * rb);
    };
    for (int64_t k = 0; k < d.n_k_heads; ++k) {
      const int64_t base = k * group;
      copy(qkv, k * S, base, S);                                // q of key head k
      copy(qkv, d.key_dim() + k * S, base + S, S);              // k
      copy(qkv, 2 * d.key_dim() + k * r * S, base + 2 * S, r * S);  // v of its r value heads
      copy(z, k * r * S, base + 2 * S + r * S, r * S);          // z of the same heads
    }
    auto upload = [&](const std::vector<uint8_t>& host, int64_t rows) {
      DeviceBuffer b = ops_.alloc(host.size());
      ops_.to_device(b.data(), host.data(), host.size());
      const WeightView v{b.data(), in.type, rows, in.cols};
      owned_.push_back(std::move(b));
      return v;
    };
    g.qkv = upload(qkv, d.conv_dim());
    g.z = upload(z, d.value_dim());
  }

  // Runs all blocks for nb tokens at positions [n_past, n_past + nb); leaves the residual in x.
  void step(State& st, std::span<const int32_t> tokens) {
    const ModelConfig& c = cfg_;
    Ops& ops = ops_;
    const int64_t nb = static_cast<int64_t>(tokens.size());
    const int64_t E = c.n_embd;

    std::vector<int32_t> pos(static_cast<size_t>(nb));
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(st.n_past()));
    ops.to_device(st.tokens.data(), tokens.data(), tokens.size_bytes());
    ops.to_device(st.pos.data(), pos.data(), pos.size() * sizeof(int32_t));

    float* x = st.x.f32();
    float* h = st.h.f32();
    ops.embed(tok_embd_, st.tokens.i32(), nb, x);
    debug("inp_embd", -1, x, nb, E);

    // Empty without a hook: the DeltaNet step then fuses ops whose intermediates a hook would read.
    Debug hook;
    if (debug_) hook = [this](std::string_view n, int32_t l, const float* p, int64_t r, int64_t k) { debug(n, l, p, r, k); };
    // Each residual join also computes the next norm (Ops::residual_norm): the first block's input
    // norm is the only one run on its own.
    ops.rmsnorm(x, layers_[0].attn_norm, nb, E, E, c.rms_eps, h);
    for (int32_t il = 0; il < c.n_layer; ++il) {
      const Layer& L = layers_[static_cast<size_t>(il)];
      debug("attn_norm", il, h, nb, E);
      if (L.kind == LayerKind::deltanet) {
        const GdnContext ctx{ops, *gdn_, c, dims_, gates_, key_map_, hook};
        deltanet_forward(ctx, L, il, st, nb);
      } else {
        attention(L, il, st, nb);
      }
      ResidualNorm mid;
      mid.a = st.mix_out.f32();
      mid.w = L.post_norm;
      mid.eps = c.rms_eps;
      mid.h = h;
      ops.residual_norm(x, nb, E, mid);
      debug("attn_residual", il, x, nb, E);
      debug("attn_post_norm", il, h, nb, E);
      moe(L, il, st, nb);
      // x += moe_out + sigmoid(w_sg·h)·shared expert, then the next block's input norm.
      ResidualNorm end;
      end.a = st.moe_out.f32();
      end.b = st.sh_out.f32();
      end.gate_logit = st.sh_logit.f32();
      // The last block's join computes the output norm: emit_logits reads h.
      end.w = il + 1 < c.n_layer ? layers_[static_cast<size_t>(il) + 1].attn_norm : output_norm_;
      end.eps = c.rms_eps;
      end.h = h;
      ops.residual_norm(x, nb, E, end);
      debug("ffn_out", il, st.moe_out.f32(), nb, E);
      debug("l_out", il, x, nb, E);
    }
  }

  // Gated full attention of block il: reads st.h, writes st.mix_out.
  void attention(const Layer& L, int32_t il, State& st, int64_t nb) {
    const ModelConfig& c = cfg_;
    Ops& ops = ops_;
    const int64_t E = c.n_embd, hd = c.head_dim_k;
    const int64_t nq = int64_t{c.n_head} * hd, nk = int64_t{c.n_head_kv} * hd;
    const int64_t nv = int64_t{c.n_head_kv} * c.head_dim_v, na = int64_t{c.n_head} * c.head_dim_v;
    float* h = st.h.f32();
    float* qg = st.qg.f32();  // per head [q | gate]: q rows at stride 2·hd
    float* k = st.k.f32();
    float* v = st.v.f32();
    const MatmulTarget proj[] = {{L.attn.wq, qg, 2 * nq}, {L.attn.wk, k, nk}, {L.attn.wv, v, nv}};
    ops.matmul_multi(proj, h, E, nb);
    debug("Qcur_full", il, qg, nb, 2 * nq);
    debug("Vcur", il, v, nb, nv);

    // q/k norms, RoPE and the K/V store as one call (one launch on CUDA); apart when a debug hook
    // reads k between the norm and RoPE.
    const KvLayerView& kv = st.kv.layer(il);
    if (!debug_) {
      const AttentionPrep prep{.q = qg, .q_head_stride = 2 * hd, .n_head = c.n_head, .k = k, .v = v,
                               .q_norm = L.attn.q_norm, .k_norm = L.attn.k_norm, .eps = c.rms_eps, .n_rot = c.n_rot,
                               .pos = st.pos.i32(), .freq_base = c.rope_freq_base, .kv = kv, .pos0 = st.n_past(),
                               .n_tokens = nb};
      ops.attention_prep(prep);
    } else {
      ops.rmsnorm(qg, L.attn.q_norm, nb * c.n_head, hd, 2 * hd, c.rms_eps, qg);
      ops.rmsnorm(k, L.attn.k_norm, nb * c.n_head_kv, hd, hd, c.rms_eps, k);
      debug("Kcur_normed", il, k, nb, nk);
      ops.rope_neox(qg, nb, c.n_head, 2 * nq, 2 * hd, c.n_rot, st.pos.i32(), c.rope_freq_base);
      ops.rope_neox(k, nb, c.n_head_kv, nk, hd, c.n_rot, st.pos.i32(), c.rope_freq_base);
      debug("Kcur", il, k, nb, nk);
      ops.kv_store(kv, st.n_past(), nb, k, v);
    }
    AttentionArgs a;
    a.q = qg;
    a.q_token_stride = 2 * nq;
    a.q_head_stride = 2 * hd;
    a.gate = qg + hd;
    a.kv = kv;
    a.n_tokens = static_cast<int32_t>(nb);
    a.n_head = c.n_head;
    a.pos0 = st.n_past();
    a.pos = st.pos.i32();
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.out = st.attn.f32();
    ops.attention(a);
    debug("attn_gated", il, a.out, nb, na);
    ops.matmul(L.attn.wo, a.out, na, nb, st.mix_out.f32(), E);
    debug("attn_output", il, st.mix_out.f32(), nb, E);
  }

  // Routed experts and the shared expert of block il: reads st.h, writes st.moe_out (routed),
  // st.sh_out and st.sh_logit (the shared expert and its gate logit, joined by step()).
  void moe(const Layer& L, int32_t il, State& st, int64_t nb) {
    const ModelConfig& c = cfg_;
    Ops& ops = ops_;
    const int64_t E = c.n_embd, F = c.n_ff_shexp;
    float* h = st.h.f32();
    // The router, the shared expert's gate and up (with its SwiGLU) and its gate logit all read
    // h: one multi-matmul, which also routes (one launch in CUDA decode).
    const MatmulTarget proj[] = {{L.gate_inp, st.router.f32(), c.n_expert},
                                 {L.gate_shexp, st.sh_gate.f32(), F, L.up_shexp, st.sh_up.f32()},
                                 {L.gate_inp_shexp, st.sh_logit.f32(), 1}};
    ops.matmul_multi_route(proj, h, E, nb, route_args(c, st.router.f32(), st.expert_ids.i32(), st.expert_w.f32()));
    debug("ffn_moe_logits", il, st.router.f32(), nb, c.n_expert);
    MoeStep req;
    req.layer = il;
    req.n_tokens = static_cast<int32_t>(nb);
    req.n_embd = c.n_embd;
    req.top_k = c.n_expert_used;
    req.x = h;
    req.expert_ids = st.expert_ids.i32();
    req.expert_weights = st.expert_w.f32();
    req.out = st.moe_out.f32();
    // The shared expert's down projection: in the executor's down launch where it takes it.
    const bool shared_in_moe = moe_->takes_shared_down(il, nb, L.down_shexp.type, F);
    if (shared_in_moe) {
      req.shared_down = L.down_shexp.data;
      req.shared_type = L.down_shexp.type;
      req.shared_ff = F;
      req.shared_h = st.sh_gate.f32();
      req.shared_out = st.sh_out.f32();
    }
    run_moe(*moe_, req);
    debug("ffn_moe_out", il, req.out, nb, E);

    if (!shared_in_moe) ops.matmul(L.down_shexp, st.sh_gate.f32(), F, nb, st.sh_out.f32(), E);
    debug("ffn_shexp", il, st.sh_out.f32(), nb, E);
    // The gate (sigmoid(sh_logit)·sh_out added to moe_out) is applied by the residual join.
  }

  // Final norm and lm_head for rows [r0, r0 + n) of the last step, written to host `out`.
  void emit_logits(State& st, int64_t r0, int64_t n, float* out) {
    const int64_t E = cfg_.n_embd, V = cfg_.n_vocab;
    for (int64_t r = r0; r < r0 + n; r += st.logits_rows) {
      const int64_t m = std::min(st.logits_rows, r0 + n - r);
      const float* hn = st.h.f32() + r * E;  // rmsnorm(x)·output_norm, by the last residual join
      debug("result_norm", -1, hn, m, E);
      ops_.matmul(output_, hn, E, m, st.logits.f32(), V);
      debug("result_output", -1, st.logits.f32(), m, V);
      ops_.to_host(out + (r - r0) * V, st.logits.data(), static_cast<size_t>(m * V) * sizeof(float));
    }
  }

  GateLayout gates_;
  cpu::GdnKeyHeadMap key_map_;
  GdnDims dims_;
  std::unique_ptr<GdnOps> gdn_;
  WeightView tok_embd_;               // (n_vocab, n_embd)
  const float* output_norm_ = nullptr;  // (n_embd)
  WeightView output_;                 // (n_vocab, n_embd)
  std::vector<Layer> layers_;
  std::vector<DeviceBuffer> owned_;  // weights Ferry rearranged at load (legacy ssm_in)
  std::unique_ptr<MoeExecutor> moe_;
};

}  // namespace

std::unique_ptr<Model> make_hybrid(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                   const MoeExecutorFactory& moe, const LoadProgress& progress,
                                   GateLayout gates, cpu::GdnKeyHeadMap key_map) {
  return std::make_unique<Hybrid>(f, std::move(cfg), ops, moe, progress, gates, key_map);
}

}  // namespace hybrid

StateFootprint hybrid_state_footprint(Ops& ops, const ModelConfig& c, const StateOptions& o) {
  const hybrid::State st(ops, c, hybrid::gdn_dims(c), o);
  return {st.kv.bytes(), st.recurrent_bytes, st.ws_bytes};
}

std::unique_ptr<Model> make_qwen35moe(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                      const MoeExecutorFactory& moe, const LoadProgress& progress) {
  return hybrid::make_hybrid(f, std::move(cfg), ops, moe, progress, hybrid::GateLayout::split,
                             cpu::GdnKeyHeadMap::tiled);
}

}  // namespace ferry
