#include "runtime/model/config.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "runtime/core/error.hpp"
#include "runtime/core/named.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry {
namespace {

// Architectures with a forward implementation. Keep in sync with model.cpp's dispatch.
constexpr Arch kSupported[] = {Arch::qwen3moe, Arch::qwen35moe, Arch::qwen3next};

// general.architecture's spellings.
constexpr std::array<Named<Arch>, 3> kArchNames{
    {{"qwen3moe", Arch::qwen3moe}, {"qwen35moe", Arch::qwen35moe}, {"qwen3next", Arch::qwen3next}}};

std::optional<Arch> arch_from_name(std::string_view s) { return find_named(kArchNames, s); }

// Reads {arch}.key as a positive int32 (or returns `def` when absent and a default exists).
class Keys {
 public:
  Keys(const gguf::File& f, std::string_view arch) : f_(f), prefix_(std::string(arch) + ".") {}

  int32_t i32(std::string_view key, std::optional<int64_t> def = std::nullopt) const {
    const std::string k = prefix_ + std::string(key);
    const gguf::Value* v = f_.find(k);
    int64_t x;
    if (!v) {
      if (!def) fail(ErrorKind::format, "key {} missing in {}", k, f_.path());
      x = *def;
    } else if (v->type == gguf::ValueType::array) {
      // Per-layer arrays (e.g. head_count_kv) are accepted when all layers agree.
      const auto xs = f_.get_int_array(k);
      if (xs.empty()) fail(ErrorKind::format, "key {} in {} is an empty array", k, f_.path());
      if (std::any_of(xs.begin(), xs.end(), [&](int64_t y) { return y != xs[0]; }))
        fail(ErrorKind::unsupported, "key {} in {} varies per layer; Ferry needs one value", k, f_.path());
      x = xs[0];
    } else {
      x = f_.get_i64(k);
    }
    if (x < 0 || x > INT32_MAX) fail(ErrorKind::format, "key {} in {} has value {} (out of range)", k, f_.path(), x);
    return static_cast<int32_t>(x);
  }
  float f32(std::string_view key, std::optional<float> def = std::nullopt) const {
    const std::string k = prefix_ + std::string(key);
    if (!f_.has(k)) {
      if (!def) fail(ErrorKind::format, "key {} missing in {}", k, f_.path());
      return *def;
    }
    return f_.get_f32(k);
  }
  bool has(std::string_view key) const { return f_.has(prefix_ + std::string(key)); }

 private:
  const gguf::File& f_;
  std::string prefix_;
};

void read_qwen3moe(const gguf::File& f, ModelConfig& c) {
  const Keys k(f, "qwen3moe");
  c.n_layer = k.i32("block_count");
  c.n_embd = k.i32("embedding_length");
  c.n_ctx_train = k.i32("context_length");
  c.n_head = k.i32("attention.head_count");
  c.n_head_kv = k.i32("attention.head_count_kv", c.n_head);
  c.head_dim_k = k.i32("attention.key_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.head_dim_v = k.i32("attention.value_length", c.head_dim_k);
  c.n_rot = k.i32("rope.dimension_count", c.head_dim_k);
  c.rope_freq_base = k.f32("rope.freq_base", 10000.0f);
  c.rms_eps = k.f32("attention.layer_norm_rms_epsilon");
  c.n_expert = k.i32("expert_count");
  c.n_expert_used = k.i32("expert_used_count");
  c.n_ff_exp = k.i32("expert_feed_forward_length");
  c.expert_weights_norm = true;  // llama.cpp builds qwen3moe with norm_w = true
  c.expert_weights_scale = k.f32("expert_weights_scale", 0.0f);
  c.layer_kind.assign(static_cast<size_t>(c.n_layer), LayerKind::attention);
}

// qwen35moe / qwen3next (llama.cpp's load_arch_hparams of both): attention keys as qwen3moe plus
// the shared expert, the ssm.* DeltaNet keys and which blocks are recurrent. block_count includes
// nextn_predict_layers trailing MTP blocks, which are not run.
void read_hybrid(const gguf::File& f, ModelConfig& c, std::string_view arch) {
  const Keys k(f, arch);
  const int32_t n_all = k.i32("block_count");
  const int32_t n_nextn = k.i32("nextn_predict_layers", 0);
  if (n_nextn >= n_all)
    fail(ErrorKind::format, "key {}.nextn_predict_layers in {} is {}, not below block_count {}", arch,
         f.path(), n_nextn, n_all);
  c.n_layer = n_all - n_nextn;
  c.n_embd = k.i32("embedding_length");
  c.n_ctx_train = k.i32("context_length");
  c.n_head = k.i32("attention.head_count");
  c.n_head_kv = k.i32("attention.head_count_kv", c.n_head);
  c.head_dim_k = k.i32("attention.key_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.head_dim_v = k.i32("attention.value_length", c.head_dim_k);
  c.n_rot = k.i32("rope.dimension_count", c.head_dim_k);
  c.rope_freq_base = k.f32("rope.freq_base", 10000.0f);
  c.rms_eps = k.f32("attention.layer_norm_rms_epsilon");
  c.attn_output_gate = true;
  c.n_expert = k.i32("expert_count");
  c.n_expert_used = k.i32("expert_used_count");
  c.n_ff_exp = k.i32("expert_feed_forward_length");
  c.n_ff_shexp = k.i32("expert_shared_feed_forward_length",
                       k.has("feed_forward_length") ? k.i32("feed_forward_length") : 0);
  c.expert_weights_norm = true;
  c.expert_weights_scale = k.f32("expert_weights_scale", 0.0f);
  c.ssm_conv_kernel = k.i32("ssm.conv_kernel");
  c.ssm_state_size = k.i32("ssm.state_size");
  c.ssm_group_count = k.i32("ssm.group_count");
  c.ssm_time_step_rank = k.i32("ssm.time_step_rank");
  c.ssm_inner_size = k.i32("ssm.inner_size");
  c.layer_kind.assign(static_cast<size_t>(c.n_layer), LayerKind::deltanet);
  const std::string recurrent = std::string(arch) + ".attention.recurrent_layers";
  if (const gguf::Value* v = f.find(recurrent); v && v->type == gguf::ValueType::array) {
    // Bool or integer elements; the Array keeps both widened in `ints`.
    const gguf::Array& arr = std::get<gguf::Array>(v->v);
    if (arr.elem_type == gguf::ValueType::string || arr.elem_type == gguf::ValueType::f32 ||
        arr.elem_type == gguf::ValueType::f64 || arr.elem_type == gguf::ValueType::array)
      fail(ErrorKind::format, "key {} in {} must be an array of bools or integers", recurrent, f.path());
    const std::vector<int64_t>& xs = arr.ints;
    if (xs.size() != static_cast<size_t>(n_all))
      fail(ErrorKind::format, "key {} in {} has {} entries, expected block_count {}", recurrent,
           f.path(), xs.size(), n_all);
    for (int32_t i = 0; i < c.n_layer; ++i)
      c.layer_kind[static_cast<size_t>(i)] = xs[static_cast<size_t>(i)] ? LayerKind::deltanet : LayerKind::attention;
  } else if (v) {
    const bool all = v->type == gguf::ValueType::boolean ? f.get_bool(recurrent) : f.get_i64(recurrent) != 0;
    c.layer_kind.assign(static_cast<size_t>(c.n_layer), all ? LayerKind::deltanet : LayerKind::attention);
  } else {
    const int32_t interval = k.i32("full_attention_interval", 4);
    if (interval < 1)
      fail(ErrorKind::format, "key {}.full_attention_interval in {} must be >= 1", arch, f.path());
    for (int32_t i = 0; i < c.n_layer; ++i)
      if ((i + 1) % interval == 0) c.layer_kind[static_cast<size_t>(i)] = LayerKind::attention;
  }
}

}  // namespace

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::qwen3moe: return "qwen3moe";
    case Arch::qwen35moe: return "qwen35moe";
    case Arch::qwen3next: return "qwen3next";
  }
  return "?";
}

int32_t ModelConfig::n_attention_layers() const {
  return static_cast<int32_t>(std::count(layer_kind.begin(), layer_kind.end(), LayerKind::attention));
}

std::string supported_architectures() {
  std::string s;
  for (Arch a : kSupported) {
    if (!s.empty()) s += ", ";
    s += arch_name(a);
  }
  return s;
}

ModelConfig read_config(const gguf::File& f) {
  const std::string name = f.architecture();
  const auto arch = arch_from_name(name);
  if (!arch || std::find(std::begin(kSupported), std::end(kSupported), *arch) == std::end(kSupported))
    fail(ErrorKind::unsupported, "architecture '{}' in {} is not supported (supported: {})", name,
         f.path(), supported_architectures());
  ModelConfig c;
  c.arch = *arch;
  c.file = f.path();
  switch (c.arch) {
    case Arch::qwen3moe: read_qwen3moe(f, c); break;
    case Arch::qwen35moe: read_hybrid(f, c, "qwen35moe"); break;
    case Arch::qwen3next: read_hybrid(f, c, "qwen3next"); break;
    default: fail(ErrorKind::unsupported, "architecture '{}' in {}: no config reader", name, f.path());
  }
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) fail(ErrorKind::format, "tensor token_embd.weight missing in {}", f.path());
  if (emb->n_dims != 2 || emb->ne[1] > INT32_MAX)
    fail(ErrorKind::format, "tensor token_embd.weight in {} has {} dims, expected 2 {{n_embd, n_vocab}}",
         f.path(), emb->n_dims);
  c.n_vocab = static_cast<int32_t>(emb->ne[1]);
  validate_config(c);
  return c;
}

void validate_config(const ModelConfig& c) {
  const std::string_view a = arch_name(c.arch);
  auto need = [&](bool ok, std::string_view what) {
    if (!ok) fail(ErrorKind::format, "{} model {}: {}", a, c.file, what);
  };
  need(c.n_layer > 0, fmt::format("block_count must be > 0 (got {})", c.n_layer));
  need(c.n_embd > 0, fmt::format("embedding_length must be > 0 (got {})", c.n_embd));
  need(c.n_vocab > 0, "the vocabulary (token_embd rows) is empty");
  need(c.n_ctx_train > 0, fmt::format("context_length must be > 0 (got {})", c.n_ctx_train));
  need(c.rms_eps > 0.0f && c.rms_eps < 1.0f,
       fmt::format("attention.layer_norm_rms_epsilon {} outside (0, 1)", c.rms_eps));
  need(static_cast<int32_t>(c.layer_kind.size()) == c.n_layer, "layer kinds do not cover every layer");
  if (c.n_attention_layers() > 0) {
    need(c.n_head > 0, fmt::format("attention.head_count must be > 0 (got {})", c.n_head));
    need(c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0,
         fmt::format("attention.head_count {} is not a multiple of head_count_kv {}", c.n_head, c.n_head_kv));
    need(c.head_dim_k > 0 && c.head_dim_v > 0,
         fmt::format("attention key/value length must be > 0 (got {}, {})", c.head_dim_k, c.head_dim_v));
    need(c.n_rot > 0 && c.n_rot % 2 == 0 && c.n_rot <= c.head_dim_k,
         fmt::format("rope.dimension_count {} must be even and in (0, key_length {}]", c.n_rot, c.head_dim_k));
    need(c.rope_freq_base > 0.0f, fmt::format("rope.freq_base {} must be > 0", c.rope_freq_base));
  }
  need(c.n_expert > 0, fmt::format("expert_count must be > 0 (got {})", c.n_expert));
  need(c.n_expert_used > 0 && c.n_expert_used <= c.n_expert,
       fmt::format("expert_used_count {} must be in [1, expert_count {}]", c.n_expert_used, c.n_expert));
  need(c.n_ff_exp > 0, fmt::format("expert_feed_forward_length must be > 0 (got {})", c.n_ff_exp));
}

}  // namespace ferry
