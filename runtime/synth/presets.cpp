// Architecture presets: the real shapes (from the published GGUFs and llama.cpp's loader) and the
// reduced ones used for tests (tiny) and 2-core benchmarks (small). docs/synth.md lists them.
#include <array>

#include "runtime/core/error.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

constexpr std::array<std::pair<Arch, std::string_view>, 3> kArchNames = {{
    {Arch::qwen3moe, "qwen3moe"}, {Arch::qwen35moe, "qwen35moe"}, {Arch::qwen3next, "qwen3next"}}};

std::string_view real_preset_name(Arch a) {
  switch (a) {
    case Arch::qwen3moe: return "30b-a3b";
    case Arch::qwen35moe: return "35b-a3b";
    case Arch::qwen3next: return "80b-a3b";
  }
  return "";
}

// Gated DeltaNet geometry of the real models (Qwen3.5-35B-A3B and Qwen3-Next-80B-A3B share it):
// 16 key heads and 32 value heads of dimension 128, conv kernel 4, full attention every 4th layer.
void real_deltanet(Hparams& h) {
  h.full_attention_interval = 4;
  h.ssm_conv_kernel = 4;
  h.ssm_state_size = 128;
  h.ssm_group_count = 16;
  h.ssm_time_step_rank = 32;
  h.ssm_inner_size = 4096;
}

// The tiny DeltaNet keeps the real ratios (2 value heads per key head, v width = inner size) at a
// quarter of the head dimension; rows stay multiples of 256 so every K-quant applies.
void tiny_deltanet(Hparams& h) {
  h.full_attention_interval = 4;
  h.ssm_conv_kernel = 4;
  h.ssm_state_size = 32;
  h.ssm_group_count = 4;
  h.ssm_time_step_rank = 8;
  h.ssm_inner_size = 256;
}

Hparams qwen3moe(Preset p) {
  Hparams h;
  h.arch = Arch::qwen3moe;
  h.rope_freq_base = 1e6f;
  h.rms_eps = 1e-6f;
  if (p == Preset::tiny) {
    h.n_layer = 4, h.n_embd = 256, h.n_head = 4, h.n_head_kv = 2, h.head_dim = 64;
    h.n_expert = 8, h.n_expert_used = 2, h.n_ff_exp = 256, h.n_vocab = 768, h.n_ctx_train = 4096;
  } else {
    // Qwen3-30B-A3B: 48 layers, 32 query / 4 KV heads of 128, 128 experts (top-8) of 768.
    h.n_layer = 48, h.n_embd = 2048, h.n_head = 32, h.n_head_kv = 4, h.head_dim = 128;
    h.n_expert = 128, h.n_expert_used = 8, h.n_ff_exp = 768, h.n_vocab = 151936, h.n_ctx_train = 40960;
    if (p == Preset::small) h.n_layer = 8, h.n_expert = 48;
  }
  h.n_ff = h.n_ff_exp * h.n_expert_used;  // the real file says 6144 = 768 · 8
  return h;
}

Hparams qwen35moe(Preset p) {
  Hparams h;
  h.arch = Arch::qwen35moe;
  h.rope_freq_base = 1e7f;
  h.rms_eps = 1e-6f;
  if (p == Preset::tiny) {
    h.n_layer = 4, h.n_embd = 256, h.n_head = 4, h.n_head_kv = 1, h.head_dim = 64;
    h.n_expert = 8, h.n_expert_used = 2, h.n_ff_exp = 256, h.n_ff_shexp = 256, h.n_vocab = 768;
    h.n_ctx_train = 4096;
    h.n_rot = 16;                     // a quarter of the head, as in the real model (64 of 256)
    h.rope_sections = {3, 3, 2, 0};  // the real [11, 11, 10, 0] scaled to n_rot / 2 = 8 pairs
    tiny_deltanet(h);
  } else {
    // Qwen3.5-35B-A3B: 40 layers (10 full attention), 16 query / 2 KV heads of 256, 256 experts
    // (top-8) of 512 plus one shared expert of 512.
    h.n_layer = 40, h.n_embd = 2048, h.n_head = 16, h.n_head_kv = 2, h.head_dim = 256;
    h.n_expert = 256, h.n_expert_used = 8, h.n_ff_exp = 512, h.n_ff_shexp = 512, h.n_vocab = 248320;
    h.n_ctx_train = 262144;
    h.n_rot = 64;
    h.rope_sections = {11, 11, 10, 0};
    real_deltanet(h);
    if (p == Preset::small) h.n_layer = 8, h.n_expert = 48;
  }
  return h;
}

Hparams qwen3next(Preset p) {
  Hparams h;
  h.arch = Arch::qwen3next;
  h.rope_freq_base = 1e7f;
  h.rms_eps = 1e-6f;
  if (p == Preset::tiny) {
    h.n_layer = 4, h.n_embd = 256, h.n_head = 4, h.n_head_kv = 1, h.head_dim = 64;
    h.n_expert = 8, h.n_expert_used = 2, h.n_ff_exp = 256, h.n_ff_shexp = 256, h.n_vocab = 768;
    h.n_ctx_train = 4096;
    h.n_rot = 16;
    tiny_deltanet(h);
  } else {
    // Qwen3-Next-80B-A3B: 48 layers (12 full attention), 16 query / 2 KV heads of 256, 512
    // experts (top-10) of 512 plus one shared expert of 512; Qwen2 tokenizer (vocab 151936).
    h.n_layer = 48, h.n_embd = 2048, h.n_head = 16, h.n_head_kv = 2, h.head_dim = 256;
    h.n_expert = 512, h.n_expert_used = 10, h.n_ff_exp = 512, h.n_ff_shexp = 512, h.n_vocab = 151936;
    h.n_ctx_train = 262144;
    h.n_rot = 64;
    real_deltanet(h);
    if (p == Preset::small) h.n_layer = 8, h.n_expert = 48;
  }
  h.n_ff = h.n_ff_exp * h.n_expert_used;  // the real file says 5120 = 512 · 10
  return h;
}

}  // namespace

std::string_view arch_name(Arch a) {
  for (const auto& [k, v] : kArchNames)
    if (k == a) return v;
  return "?";
}

std::optional<Arch> arch_from_name(std::string_view s) {
  for (const auto& [k, v] : kArchNames)
    if (v == s) return k;
  return std::nullopt;
}

std::string_view preset_name(Arch a, Preset p) {
  switch (p) {
    case Preset::tiny: return "tiny";
    case Preset::small: return "small";
    case Preset::real: return real_preset_name(a);
  }
  return "?";
}

std::optional<Preset> preset_from_name(Arch a, std::string_view s) {
  if (s == "tiny") return Preset::tiny;
  if (s == "small") return Preset::small;
  if (s == real_preset_name(a)) return Preset::real;
  return std::nullopt;
}

Hparams preset_hparams(const Options& o) {
  Hparams h;
  switch (o.arch) {
    case Arch::qwen3moe: h = qwen3moe(o.preset); break;
    case Arch::qwen35moe: h = qwen35moe(o.preset); break;
    case Arch::qwen3next: h = qwen3next(o.preset); break;
  }
  if (o.n_layer) h.n_layer = *o.n_layer;
  if (o.n_expert) h.n_expert = *o.n_expert;
  if (o.n_expert_used) h.n_expert_used = *o.n_expert_used;
  if (h.n_layer == 0 || h.n_layer > 1024)
    fail(ErrorKind::invalid_arg, "layer count {} out of range 1..1024", h.n_layer);
  if (h.n_expert < 1 || h.n_expert > 4096)
    fail(ErrorKind::invalid_arg, "expert count {} out of range 1..4096", h.n_expert);
  if (h.n_expert_used < 1 || h.n_expert_used > h.n_expert)
    fail(ErrorKind::invalid_arg, "experts used per token ({}) must be in 1..{} (the expert count)",
         h.n_expert_used, h.n_expert);
  if (h.full_attention_interval != 0 && h.n_layer < h.full_attention_interval)
    fail(ErrorKind::invalid_arg, "{} needs at least {} layers to have a full-attention layer",
         arch_name(h.arch), h.full_attention_interval);
  return h;
}

}  // namespace ferry::synth
