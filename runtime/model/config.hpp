#pragma once
// Hyperparameters of a model, read from GGUF metadata ({arch}.* keys) and validated once, so the
// forward code can trust them. One struct for every architecture; fields an architecture does not
// use stay at their defaults.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::gguf { class File; }

namespace ferry {

enum class Arch { qwen3moe, qwen35moe, qwen3next };
std::string_view arch_name(Arch a);

// What the token mixer of a layer is.
enum class LayerKind { attention, deltanet };

struct ModelConfig {
  Arch arch = Arch::qwen3moe;
  std::string file;  // path, for error messages

  int32_t n_layer = 0;      // blocks run by the forward (trailing MTP/nextn blocks excluded)
  int32_t n_embd = 0;
  int32_t n_vocab = 0;      // rows of token_embd
  int64_t n_ctx_train = 0;  // context_length
  float rms_eps = 1e-6f;

  // Attention
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim_k = 0;   // attention.key_length (default n_embd / n_head)
  int32_t head_dim_v = 0;   // attention.value_length (default head_dim_k)
  int32_t n_rot = 0;        // rope.dimension_count (default head_dim_k): NEOX on the first n_rot dims
  float rope_freq_base = 10000.0f;
  bool attn_output_gate = false;  // qwen35moe: q projection carries a per-head sigmoid gate

  // Mixture of experts
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_exp = 0;        // expert_feed_forward_length
  int32_t n_ff_shexp = 0;      // shared expert width, 0 = none
  bool expert_weights_norm = true;   // renormalise the top-k weights to sum 1
  float expert_weights_scale = 0.0f; // applied when not 0 or 1 (llama.cpp semantics)

  // Per layer: which token mixer (all attention for qwen3moe).
  std::vector<LayerKind> layer_kind;

  // Gated DeltaNet (qwen35moe / qwen3next): ssm.* keys. Zero when unused.
  int32_t ssm_conv_kernel = 0;
  int32_t ssm_state_size = 0;
  int32_t ssm_group_count = 0;
  int32_t ssm_time_step_rank = 0;
  int32_t ssm_inner_size = 0;

  int32_t n_gqa() const { return n_head / n_head_kv; }
  int32_t n_attention_layers() const;
};

// Architectures Ferry can run, for messages ("qwen3moe, ...").
std::string supported_architectures();

// Reads and validates the config. Errors (ferry::Error):
//   unsupported — "architecture 'X' in FILE is not supported (supported: ...)"
//   format      — a missing key, an out-of-range or inconsistent value (names key and file).
ModelConfig read_config(const gguf::File& f);

// Checks the invariants the forward relies on (also used on hand-built configs in tests).
void validate_config(const ModelConfig& c);

}  // namespace ferry
