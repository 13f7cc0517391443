// qwen3moe forward, written once against Ops (graph as llama.cpp's llm_build_qwen3moe):
//   x = embed(tokens)
//   per layer: h = rmsnorm(x)·attn_norm; q,k,v = W·h; q,k per-head rmsnorm; RoPE(q,k);
//              x += wo·attention(q, cache); h = rmsnorm(x)·ffn_norm; x += MoE(h)
//   logits = output · rmsnorm(x)·output_norm      (output falls back to token_embd)
#include "runtime/model/qwen3moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/weights.hpp"

namespace ferry {
namespace {

struct Layer {
  WeightView attn_norm;  // (1, n_embd)
  WeightView wq;         // (n_head·head_dim_k, n_embd)
  WeightView wk;         // (n_head_kv·head_dim_k, n_embd)
  WeightView wv;         // (n_head_kv·head_dim_v, n_embd)
  WeightView wo;         // (n_embd, n_head·head_dim_v)
  WeightView q_norm;     // (1, head_dim_k)
  WeightView k_norm;     // (1, head_dim_k)
  WeightView ffn_norm;   // (1, n_embd)
  WeightView gate_inp;   // (n_expert, n_embd) router
};

// Per-session state: KV cache plus the workspace of one forward step of up to n_batch tokens
// (B below). Everything lives in backend memory.
class State final : public ModelState {
 public:
  State(Ops& ops, const ModelConfig& c, const StateOptions& o)
      : ModelState(o.n_ctx, o.n_batch), ops(ops), kv(ops, c, o.n_ctx, o.type_k, o.type_v) {
    const int64_t B = o.n_batch;
    const int64_t nq = int64_t{c.n_head} * c.head_dim_k, nk = int64_t{c.n_head_kv} * c.head_dim_k;
    const int64_t nv = int64_t{c.n_head_kv} * c.head_dim_v, na = int64_t{c.n_head} * c.head_dim_v;
    auto f32 = [&](int64_t n) {
      DeviceBuffer b = ops.alloc(static_cast<size_t>(n) * sizeof(float));
      ws_bytes += b.bytes();
      return b;
    };
    tokens = f32(B);  // int32 and float have the same size
    pos = f32(B);
    x = f32(B * c.n_embd);
    h = f32(B * c.n_embd);
    q = f32(B * nq);
    k = f32(B * nk);
    v = f32(B * nv);
    attn = f32(B * na);
    o_proj = f32(B * c.n_embd);
    router = f32(B * c.n_expert);
    expert_ids = f32(B * c.n_expert_used);
    expert_w = f32(B * c.n_expert_used);
    moe_out = f32(B * c.n_embd);
    logits_rows = std::min<int64_t>(B, kLogitsRows);
    logits = f32(logits_rows * c.n_vocab);
  }
  size_t bytes() const override { return kv.bytes() + ws_bytes; }
  void extend_by_copy(int64_t n) override {
    kv.replicate(ops, n_past_, n);
    n_past_ = n;
  }

  // Logits are produced in slices of this many rows so the workspace stays small for 150k-token
  // vocabularies (512 rows × 151936 × 4 B would be 311 MB).
  static constexpr int64_t kLogitsRows = 16;

  Ops& ops;
  KvCache kv;
  size_t ws_bytes = 0;
  DeviceBuffer tokens;      // (B) int32
  DeviceBuffer pos;         // (B) int32
  DeviceBuffer x;           // (B, n_embd) residual stream
  DeviceBuffer h;           // (B, n_embd) normed input of a sub-block
  DeviceBuffer q, k, v;     // (B, n_head, head_dim_k), (B, n_head_kv, head_dim_k), (B, n_head_kv, head_dim_v)
  DeviceBuffer attn;        // (B, n_head, head_dim_v)
  DeviceBuffer o_proj;      // (B, n_embd)
  DeviceBuffer router;      // (B, n_expert) router logits
  DeviceBuffer expert_ids;  // (B, top_k) int32
  DeviceBuffer expert_w;    // (B, top_k)
  DeviceBuffer moe_out;     // (B, n_embd)
  int64_t logits_rows = 0;
  DeviceBuffer logits;      // (logits_rows, n_vocab)
};

class Qwen3Moe final : public Model {
 public:
  Qwen3Moe(const gguf::File& f, ModelConfig cfg, Ops& ops, const MoeExecutorFactory& moe,
           const LoadProgress& progress)
      : Model(std::move(cfg), ops) {
    const ModelConfig& c = cfg_;
    const WeightLoader w(f);
    const int64_t nq = int64_t{c.n_head} * c.head_dim_k, nk = int64_t{c.n_head_kv} * c.head_dim_k;
    const int64_t nv = int64_t{c.n_head_kv} * c.head_dim_v, na = int64_t{c.n_head} * c.head_dim_v;
    const WeightView tok_embd = w.matrix("token_embd.weight", c.n_embd, c.n_vocab);
    tok_embd_ = ops.resident(tok_embd);
    output_norm_ = ops.resident(w.vector("output_norm.weight", c.n_embd));
    // No output.weight: the lm_head is tied to the embedding table (resident() shares the copy).
    output_ = w.has("output.weight") ? ops.resident_matmul(w.matrix("output.weight", c.n_embd, c.n_vocab))
                                       : ops.resident(tok_embd);
    for (int32_t il = 0; il < c.n_layer; ++il) {
      auto name = [&](std::string_view s) { return layer_tensor(il, s); };
      Layer L;
      L.attn_norm = ops.resident(w.vector(name("attn_norm"), c.n_embd));
      L.wq = ops.resident_matmul(w.matrix(name("attn_q"), c.n_embd, nq));
      L.wk = ops.resident_matmul(w.matrix(name("attn_k"), c.n_embd, nk));
      L.wv = ops.resident_matmul(w.matrix(name("attn_v"), c.n_embd, nv));
      L.wo = ops.resident_matmul(w.matrix(name("attn_output"), na, c.n_embd));
      L.q_norm = ops.resident(w.vector(name("attn_q_norm"), c.head_dim_k));
      L.k_norm = ops.resident(w.vector(name("attn_k_norm"), c.head_dim_k));
      L.ffn_norm = ops.resident(w.vector(name("ffn_norm"), c.n_embd));
      L.gate_inp = ops.resident_matmul(w.matrix(name("ffn_gate_inp"), c.n_embd, c.n_expert));
      MoeLayerWeights m;
      m.gate = w.experts(name("ffn_gate_exps"), c.n_embd, c.n_ff_exp, c.n_expert);
      m.up = w.experts(name("ffn_up_exps"), c.n_embd, c.n_ff_exp, c.n_expert);
      m.down = w.experts(name("ffn_down_exps"), c.n_ff_exp, c.n_embd, c.n_expert);
      m.n_expert = c.n_expert;
      layers_.push_back(L);
      moe_layers_.push_back(m);
      if (progress) progress(static_cast<float>(il + 1) / static_cast<float>(c.n_layer + 1));
    }
    moe_ = moe(moe_layers_);
    if (!moe_) fail(ErrorKind::internal, "no MoE executor for {}", f.path());
    if (progress) progress(1.0f);
  }

  std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
    if (o.n_batch < 1) fail(ErrorKind::invalid_arg, "batch size {} must be >= 1", o.n_batch);
    return std::make_unique<State>(ops_, cfg_, o);
  }

  void forward(ModelState& base, std::span<const int32_t> tokens, LogitsMode mode, float* logits) override {
    auto* st = dynamic_cast<State*>(&base);
    if (!st) fail(ErrorKind::internal, "qwen3moe forward: the state was made by another model");
    forward_in_batches(*st, cfg_, tokens, mode, logits,
                       [&](std::span<const int32_t> step_tokens) {
                         run_step(static_cast<int64_t>(step_tokens.size()), *moe_,
                                  [&] { step(*st, step_tokens); });
                       },
                       [&](int64_t row, int64_t n_rows, float* out) { emit_logits(*st, row, n_rows, out); });
  }

 private:
  // Runs all blocks for nb tokens at positions [n_past, n_past + nb); leaves the residual in x.
  void step(State& st, std::span<const int32_t> tokens) {
    const ModelConfig& c = cfg_;
    Ops& ops = ops_;
    const int64_t nb = static_cast<int64_t>(tokens.size());
    const int64_t p0 = st.n_past();
    const int64_t E = c.n_embd;
    const int64_t nq = int64_t{c.n_head} * c.head_dim_k, nk = int64_t{c.n_head_kv} * c.head_dim_k;
    const int64_t nv = int64_t{c.n_head_kv} * c.head_dim_v, na = int64_t{c.n_head} * c.head_dim_v;

    std::vector<int32_t> pos(static_cast<size_t>(nb));
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(p0));
    ops.to_device(st.tokens.data(), tokens.data(), tokens.size_bytes());
    ops.to_device(st.pos.data(), pos.data(), pos.size() * sizeof(int32_t));

    float* x = st.x.f32();
    float* h = st.h.f32();
    ops.embed(tok_embd_, st.tokens.i32(), nb, x);
    debug("inp_embd", -1, x, nb, E);

    // Each residual join also computes the next norm (Ops::residual_norm): the first block's input
    // norm is the only one run on its own.
    ops.rmsnorm(x, norm(layers_[0].attn_norm), nb, E, E, c.rms_eps, h);
    for (int32_t il = 0; il < c.n_layer; ++il) {
      const Layer& L = layers_[static_cast<size_t>(il)];
      debug("attn_norm", il, h, nb, E);

      float* q = st.q.f32();
      float* k = st.k.f32();
      float* v = st.v.f32();
      const MatmulTarget qkv[] = {{L.wq, q, nq}, {L.wk, k, nk}, {L.wv, v, nv}};
      ops.matmul_multi(qkv, h, E, nb);
      debug("Vcur", il, v, nb, nv);

      // q/k norms, RoPE and the K/V store as one call (one launch on CUDA); apart when a debug
      // hook reads q and k between the norm and RoPE.
      const KvLayerView& kv = st.kv.layer(il);
      if (!debug_) {
        const AttentionPrep prep{.q = q, .q_head_stride = c.head_dim_k, .n_head = c.n_head, .k = k, .v = v,
                                 .q_norm = norm(L.q_norm), .k_norm = norm(L.k_norm), .eps = c.rms_eps,
                                 .n_rot = c.n_rot, .pos = st.pos.i32(), .freq_base = c.rope_freq_base, .kv = kv,
                                 .pos0 = p0, .n_tokens = nb};
        ops.attention_prep(prep);
      } else {
        ops.rmsnorm(q, norm(L.q_norm), nb * c.n_head, c.head_dim_k, c.head_dim_k, c.rms_eps, q);
        ops.rmsnorm(k, norm(L.k_norm), nb * c.n_head_kv, c.head_dim_k, c.head_dim_k, c.rms_eps, k);
        debug("Qcur_normed", il, q, nb, nq);
        debug("Kcur_normed", il, k, nb, nk);
        ops.rope_neox(q, nb, c.n_head, nq, c.head_dim_k, c.n_rot, st.pos.i32(), c.rope_freq_base);
        ops.rope_neox(k, nb, c.n_head_kv, nk, c.head_dim_k, c.n_rot, st.pos.i32(), c.rope_freq_base);
        debug("Qcur", il, q, nb, nq);
        debug("Kcur", il, k, nb, nk);
        ops.kv_store(kv, p0, nb, k, v);
      }
      AttentionArgs a;
      a.q = q;
      a.q_token_stride = nq;
      a.q_head_stride = c.head_dim_k;
      a.kv = kv;
      a.n_tokens = static_cast<int32_t>(nb);
      a.n_head = c.n_head;
      a.pos0 = p0;
      a.pos = st.pos.i32();
      a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
      a.out = st.attn.f32();
      ops.attention(a);
      debug("kqv_out", il, a.out, nb, na);
      ops.matmul(L.wo, a.out, na, nb, st.o_proj.f32(), E);
      debug("attn_out", il, st.o_proj.f32(), nb, E);
      ResidualNorm mid;
      mid.a = st.o_proj.f32();
      mid.w = norm(L.ffn_norm);
      mid.eps = c.rms_eps;
      mid.h = h;
      ops.residual_norm(x, nb, E, mid);
      debug("ffn_inp", il, x, nb, E);
      debug("ffn_norm", il, h, nb, E);
      // The router and its top-k: one launch in CUDA decode (Ops::matmul_multi_route).
      const MatmulTarget router[] = {{L.gate_inp, st.router.f32(), c.n_expert}};
      ops.matmul_multi_route(router, h, E, nb, route_args(c, st.router.f32(), st.expert_ids.i32(), st.expert_w.f32()));
      debug("ffn_moe_logits", il, st.router.f32(), nb, c.n_expert);
      debug("ffn_moe_weights_norm", il, st.expert_w.f32(), nb, c.n_expert_used);
      MoeStep req;
      req.layer = il;
      req.n_tokens = static_cast<int32_t>(nb);
      req.n_embd = c.n_embd;
      req.top_k = c.n_expert_used;
      req.x = h;
      req.expert_ids = st.expert_ids.i32();
      req.expert_weights = st.expert_w.f32();
      req.out = st.moe_out.f32();
      run_moe(*moe_, req);
      debug("ffn_moe_out", il, req.out, nb, E);
      ResidualNorm end;
      end.a = req.out;
      // The last block's join computes the output norm: emit_logits reads h.
      end.w = il + 1 < c.n_layer ? norm(layers_[static_cast<size_t>(il) + 1].attn_norm) : norm(output_norm_);
      end.eps = c.rms_eps;
      end.h = h;
      ops.residual_norm(x, nb, E, end);
      debug("l_out", il, x, nb, E);
    }
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

  static const float* norm(const WeightView& w) { return static_cast<const float*>(w.data); }

  WeightView tok_embd_;     // (n_vocab, n_embd)
  WeightView output_norm_;  // (1, n_embd)
  WeightView output_;       // (n_vocab, n_embd)
  std::vector<Layer> layers_;
  std::unique_ptr<MoeExecutor> moe_;
};

}  // namespace

StateFootprint qwen3moe_state_footprint(Ops& ops, const ModelConfig& c, const StateOptions& o) {
  const State st(ops, c, o);
  return {st.kv.bytes(), 0, st.ws_bytes};
}

std::unique_ptr<Model> make_qwen3moe(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                     const MoeExecutorFactory& moe, const LoadProgress& progress) {
  return std::make_unique<Qwen3Moe>(f, std::move(cfg), ops, moe, progress);
}

}  // namespace ferry
