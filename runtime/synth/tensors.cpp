// The tensor table of each architecture: names and shapes exactly as llama.cpp's load_arch_tensors
// creates them (src/models/qwen3moe.cpp, qwen35moe.cpp, qwen3next.cpp), and how each is filled.
#include <cmath>

#include "runtime/synth/tensors.hpp"

namespace ferry::synth {
namespace {

constexpr float kNormNoise = 0.1f;

float inv_sqrt(uint64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

class Builder {
 public:
  explicit Builder(const Hparams& hp) : hp_(hp) {
    // Output projections are scaled by 1/sqrt(n_layer) so that the 2·n_layer sublayers together
    // add O(1) variance to the residual stream: activations stay O(1) at any depth.
    writer_gain_ = 1.0f / std::sqrt(static_cast<float>(hp.n_layer));
  }

  void add(std::string name, std::vector<uint64_t> ne, Init init, float scale, int layer = -1) {
    TensorPlan t;
    t.name = std::move(name);
    t.ne = std::move(ne);
    t.init = init;
    t.scale = scale;
    t.layer = layer;
    tensors_.push_back(std::move(t));
  }
  // A projection reading the residual stream (input width n_embd).
  void reader(int il, const char* what, uint64_t n_out) {
    add(blk(il, what), {hp_.n_embd, n_out}, Init::normal, inv_sqrt(hp_.n_embd), il);
  }
  // A projection writing the residual stream.
  void writer(int il, const char* what, uint64_t n_in) {
    add(blk(il, what), {n_in, hp_.n_embd}, Init::writer, inv_sqrt(n_in) * writer_gain_, il);
  }
  void norm(std::string name, uint64_t n, int il = -1) {
    add(std::move(name), {n}, Init::norm, kNormNoise, il);
  }

  void attention(int il, bool gated) {
    const uint64_t q = uint64_t{hp_.n_head} * hp_.head_dim;
    const uint64_t kv = uint64_t{hp_.n_head_kv} * hp_.head_dim;
    // Qwen3.5/Next: attn_q holds [q | gate] per head.
    reader(il, "attn_q.weight", gated ? 2 * q : q);
    reader(il, "attn_k.weight", kv);
    reader(il, "attn_v.weight", kv);
    norm(blk(il, "attn_q_norm.weight"), hp_.head_dim, il);
    norm(blk(il, "attn_k_norm.weight"), hp_.head_dim, il);
    writer(il, "attn_output.weight", q);
  }

  void deltanet(int il, bool fused_beta_alpha) {
    reader(il, "attn_qkv.weight", hp_.ssm_conv_dim());  // rows: [q | k | v]
    reader(il, "attn_gate.weight", hp_.ssm_value_dim());  // z
    add(blk(il, "ssm_conv1d.weight"), {hp_.ssm_conv_kernel, hp_.ssm_conv_dim()}, Init::normal,
        inv_sqrt(hp_.ssm_conv_kernel), il);
    add(blk(il, "ssm_dt.bias"), {hp_.ssm_time_step_rank}, Init::ssm_dt_bias, 0.0f, il);
    add(blk(il, "ssm_a"), {hp_.ssm_time_step_rank}, Init::ssm_a, 0.0f, il);
    if (fused_beta_alpha) {
      reader(il, "ssm_ba.weight", 2 * uint64_t{hp_.ssm_time_step_rank});
    } else {
      reader(il, "ssm_beta.weight", hp_.ssm_time_step_rank);
      reader(il, "ssm_alpha.weight", hp_.ssm_time_step_rank);
    }
    norm(blk(il, "ssm_norm.weight"), hp_.ssm_state_size, il);
    writer(il, "ssm_out.weight", hp_.ssm_value_dim());
  }

  void moe(int il) {
    add(blk(il, "ffn_gate_inp.weight"), {hp_.n_embd, hp_.n_expert}, Init::router, inv_sqrt(hp_.n_embd), il);
    const float in_scale = inv_sqrt(hp_.n_embd);
    add(blk(il, "ffn_gate_exps.weight"), {hp_.n_embd, hp_.n_ff_exp, hp_.n_expert}, Init::normal, in_scale, il);
    add(blk(il, "ffn_up_exps.weight"), {hp_.n_embd, hp_.n_ff_exp, hp_.n_expert}, Init::normal, in_scale, il);
    add(blk(il, "ffn_down_exps.weight"), {hp_.n_ff_exp, hp_.n_embd, hp_.n_expert}, Init::writer,
        inv_sqrt(hp_.n_ff_exp) * writer_gain_, il);
    if (hp_.n_ff_shexp == 0) return;
    add(blk(il, "ffn_gate_inp_shexp.weight"), {hp_.n_embd}, Init::normal, in_scale, il);
    reader(il, "ffn_gate_shexp.weight", hp_.n_ff_shexp);
    reader(il, "ffn_up_shexp.weight", hp_.n_ff_shexp);
    writer(il, "ffn_down_shexp.weight", hp_.n_ff_shexp);
  }

  std::vector<TensorPlan> build() {
    add("token_embd.weight", {hp_.n_embd, hp_.n_vocab}, Init::embedding, 1.0f);
    for (int il = 0; il < static_cast<int>(hp_.n_layer); ++il) {
      norm(blk(il, "attn_norm.weight"), hp_.n_embd, il);
      if (hp_.arch == Arch::qwen3moe) {
        attention(il, false);
        norm(blk(il, "ffn_norm.weight"), hp_.n_embd, il);
      } else {
        if (hp_.is_recurrent(static_cast<uint32_t>(il)))
          deltanet(il, hp_.arch == Arch::qwen3next);
        else
          attention(il, true);
        norm(blk(il, "post_attention_norm.weight"), hp_.n_embd, il);
      }
      moe(il);
    }
    norm("output_norm.weight", hp_.n_embd);
    add("output.weight", {hp_.n_embd, hp_.n_vocab}, Init::output, inv_sqrt(hp_.n_embd));
    return std::move(tensors_);
  }

 private:
  static std::string blk(int il, const char* what) { return "blk." + std::to_string(il) + "." + what; }
  const Hparams& hp_;
  float writer_gain_;
  std::vector<TensorPlan> tensors_;
};

}  // namespace

std::vector<TensorPlan> build_tensors(const Hparams& hp) { return Builder(hp).build(); }

}  // namespace ferry::synth
