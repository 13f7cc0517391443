// make_plan: hyperparameters + vocabulary + tensor table + per-tensor types + GGUF metadata.
#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/synth/expert_types.hpp"
#include "runtime/synth/quant_mix.hpp"
#include "runtime/synth/tensors.hpp"

namespace ferry::synth {
namespace {

// Merges learned from the embedded corpus (fewer if the text runs out of pairs seen twice).
constexpr int kMaxMerges = 500;
// Value of the skew channel in every embedding row (docs/synth.md, "Router skew").
constexpr uint32_t kSkewChannel = 0;
constexpr float kSkewChannelValue = 2.0f;
// Format version of the synthetic weights: bump when generated values change for the same options.
constexpr uint32_t kSynthVersion = 2;

constexpr std::string_view kChatTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}";

// Qwen's special token ids in the real vocabularies (<|endoftext|>, then <|im_start|>, <|im_end|>).
int32_t special_base(const Hparams& hp) {
  if (hp.n_vocab == 151936) return 151643;
  if (hp.n_vocab == 248320) return 248044;
  return -1;  // right after the BPE tokens
}

}  // namespace

uint64_t TensorPlan::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

uint64_t ModelPlan::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.n_bytes;
  return n;
}

const TensorPlan* ModelPlan::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::pair<std::string, gguf::Value>> build_metadata(const Options& o, const Hparams& hp,
                                                                const Vocab& vocab) {
  using gguf::Value;
  std::vector<std::pair<std::string, Value>> kv;
  const std::string a(arch_name(hp.arch));
  auto key = [&](std::string_view k) { return a + "." + std::string(k); };
  kv.emplace_back("general.architecture", Value::str(a));
  kv.emplace_back("general.type", Value::str("model"));
  kv.emplace_back("general.name", Value::str(fmt::format("Ferry synthetic {} {} (seed {})", a,
                                                         preset_name(hp.arch, o.preset), o.seed)));
  kv.emplace_back(key("block_count"), Value::u32(hp.n_layer));
  kv.emplace_back(key("context_length"), Value::u32(hp.n_ctx_train));
  kv.emplace_back(key("embedding_length"), Value::u32(hp.n_embd));
  if (hp.n_ff) kv.emplace_back(key("feed_forward_length"), Value::u32(hp.n_ff));
  kv.emplace_back(key("attention.head_count"), Value::u32(hp.n_head));
  kv.emplace_back(key("attention.head_count_kv"), Value::u32(hp.n_head_kv));
  if (!hp.rope_sections.empty()) kv.emplace_back(key("rope.dimension_sections"), Value::arr_i32(hp.rope_sections));
  kv.emplace_back(key("rope.freq_base"), Value::f32(hp.rope_freq_base));
  kv.emplace_back(key("attention.layer_norm_rms_epsilon"), Value::f32(hp.rms_eps));
  kv.emplace_back(key("expert_used_count"), Value::u32(hp.n_expert_used));
  kv.emplace_back(key("attention.key_length"), Value::u32(hp.head_dim));
  kv.emplace_back(key("attention.value_length"), Value::u32(hp.head_dim));
  kv.emplace_back(key("expert_count"), Value::u32(hp.n_expert));
  kv.emplace_back(key("expert_feed_forward_length"), Value::u32(hp.n_ff_exp));
  if (hp.n_ff_shexp) kv.emplace_back(key("expert_shared_feed_forward_length"), Value::u32(hp.n_ff_shexp));
  if (hp.full_attention_interval) {
    kv.emplace_back(key("ssm.conv_kernel"), Value::u32(hp.ssm_conv_kernel));
    kv.emplace_back(key("ssm.state_size"), Value::u32(hp.ssm_state_size));
    kv.emplace_back(key("ssm.group_count"), Value::u32(hp.ssm_group_count));
    kv.emplace_back(key("ssm.time_step_rank"), Value::u32(hp.ssm_time_step_rank));
    kv.emplace_back(key("ssm.inner_size"), Value::u32(hp.ssm_inner_size));
    // Real Qwen3-Next files omit it (llama.cpp defaults to 4); writing it states the layout.
    kv.emplace_back(key("full_attention_interval"), Value::u32(hp.full_attention_interval));
  }
  if (hp.n_rot) kv.emplace_back(key("rope.dimension_count"), Value::u32(hp.n_rot));

  kv.emplace_back("tokenizer.ggml.model", Value::str("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", Value::str(hp.arch == Arch::qwen35moe ? "qwen35" : "qwen2"));
  kv.emplace_back("tokenizer.ggml.tokens", Value::arr_str(vocab.tokens));
  kv.emplace_back("tokenizer.ggml.token_type", Value::arr_i32(vocab.token_types));
  kv.emplace_back("tokenizer.ggml.merges", Value::arr_str(vocab.merges));
  // As Qwen's own GGUFs: eos = <|im_end|>, padding and bos = <|endoftext|>, no BOS added. llama.cpp
  // derives eot (<|im_end|>) from the token text.
  kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(vocab.im_end)));
  kv.emplace_back("tokenizer.ggml.padding_token_id", Value::u32(static_cast<uint32_t>(vocab.endoftext)));
  kv.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(static_cast<uint32_t>(vocab.endoftext)));
  kv.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(false));
  kv.emplace_back("tokenizer.chat_template", Value::str(std::string(kChatTemplate)));
  kv.emplace_back("general.quantization_version", Value::u32(2));
  kv.emplace_back("general.file_type", Value::u32(llama_file_type(o.quant)));

  kv.emplace_back("ferry.synth.version", Value::u32(kSynthVersion));
  kv.emplace_back("ferry.synth.preset", Value::str(std::string(preset_name(hp.arch, o.preset))));
  kv.emplace_back("ferry.synth.seed", Value::u64(o.seed));
  kv.emplace_back("ferry.synth.router_skew", Value::f32(o.router_skew));
  kv.emplace_back("ferry.synth.skew_channel", Value::u32(kSkewChannel));
  kv.emplace_back("ferry.synth.skew_channel_value", Value::f32(kSkewChannelValue));
  if (!o.expert_types.empty())
    kv.emplace_back("ferry.synth.expert_types", Value::str(o.expert_types));
  return kv;
}

ModelPlan make_plan(const Options& o) {
  if (!(o.router_skew >= 0.0f && o.router_skew <= 8.0f))
    fail(ErrorKind::invalid_arg, "router skew {} out of range 0..8", o.router_skew);
  ModelPlan plan;
  plan.options = o;
  plan.hp = preset_hparams(o);
  plan.skew_channel = kSkewChannel;
  plan.skew_channel_value = kSkewChannelValue;
  const Vocab vocab = build_vocab(plan.hp.n_vocab, special_base(plan.hp), kMaxMerges);
  plan.metadata = build_metadata(o, plan.hp, vocab);
  plan.token_unused.resize(vocab.token_types.size());
  for (size_t i = 0; i < vocab.token_types.size(); ++i) plan.token_unused[i] = vocab.token_types[i] == kTokenUnused;
  plan.tensors = build_tensors(plan.hp);
  assign_types(plan.tensors, plan.hp, o.quant);
  if (!o.expert_types.empty())
    apply_expert_types(plan.tensors, parse_expert_types(o.expert_types, plan.hp.n_layer));
  for (auto& t : plan.tensors) t.n_bytes = row_bytes(t.type, t.ne[0]) * t.n_rows();
  return plan;
}

}  // namespace ferry::synth
