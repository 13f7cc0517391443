#pragma once
// Synthetic MoE models with the real tensor names, shapes, types and metadata of the Qwen MoE
// architectures, filled with deterministic random weights. make_plan() describes a model (metadata
// and tensor table, no weights); write_model() streams it to a GGUF file, generating and quantizing
// fixed-size chunks in parallel. The weight model (scales, router skew) is documented in
// docs/synth.md.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/core/types.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::synth {

enum class Arch { qwen3moe, qwen35moe, qwen3next };
// "real" is the full-size shape: 30b-a3b (qwen3moe), 35b-a3b (qwen35moe), 80b-a3b (qwen3next).
enum class Preset { tiny, small, real };
// llama.cpp file types (llama-quantize's names, lower case): a default type plus llama-quantize's
// per-tensor adjustments (quant_mix.hpp).
enum class QuantMix {
  f32, f16, q4_0, q4_1, q8_0, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s,
  q5_k_m, q6_k, iq4_nl, iq4_xs, mxfp4_moe,
};

std::string_view arch_name(Arch a);
std::optional<Arch> arch_from_name(std::string_view s);
std::string_view preset_name(Arch a, Preset p);  // "tiny", "small", "30b-a3b", ...
std::optional<Preset> preset_from_name(Arch a, std::string_view s);
std::string_view quant_mix_name(QuantMix q);
std::optional<QuantMix> quant_mix_from_name(std::string_view s);
std::string quant_mix_names();  // "f32, f16, q4_0, ..." for help texts and errors
uint32_t llama_file_type(QuantMix q);  // general.file_type (LLAMA_FTYPE_*)

struct Options {
  Arch arch = Arch::qwen3moe;
  Preset preset = Preset::tiny;
  QuantMix quant = QuantMix::f32;
  uint64_t seed = 1;
  // Zipf-like routing: expert of popularity rank r (1-based, per layer) gets a router logit offset
  // of about -router_skew * ln(r). 0 leaves routing near uniform. See docs/synth.md.
  float router_skew = 0.0f;
  // Overrides of the preset (for tests and benches); nullopt keeps the preset's value.
  std::optional<uint32_t> n_layer, n_expert, n_expert_used;
  // Per-layer routed expert types over the mix's, e.g. "0-4:q6_k,5-35:q4_k,36-39:down=q6_k"
  // (syntax in expert_types.hpp and docs/synth.md). Empty: the mix's types.
  std::string expert_types;
};

// Hyperparameters, named as in llama.cpp's hparams.
struct Hparams {
  Arch arch = Arch::qwen3moe;
  uint32_t n_layer = 0;
  uint32_t n_embd = 0;
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;  // attention layers
  uint32_t n_expert = 0, n_expert_used = 0;
  uint32_t n_ff_exp = 0;    // routed expert hidden size
  uint32_t n_ff_shexp = 0;  // shared expert hidden size (0: no shared expert)
  uint32_t n_ff = 0;        // {arch}.feed_forward_length as the real GGUFs carry it (0: not written)
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  float rope_freq_base = 0.0f;
  float rms_eps = 1e-6f;
  uint32_t n_rot = 0;                 // rope.dimension_count (0: not written, = head_dim)
  std::vector<int32_t> rope_sections;  // rope.dimension_sections (qwen35moe only)
  // Gated DeltaNet (qwen35moe, qwen3next): layer i is full attention iff (i+1) % interval == 0.
  uint32_t full_attention_interval = 0;  // 0: no recurrent layers
  uint32_t ssm_conv_kernel = 0, ssm_state_size = 0, ssm_group_count = 0, ssm_time_step_rank = 0,
           ssm_inner_size = 0;

  bool is_recurrent(uint32_t layer) const {
    return full_attention_interval != 0 && (layer + 1) % full_attention_interval != 0;
  }
  uint32_t ssm_key_dim() const { return ssm_state_size * ssm_group_count; }      // q and k width
  uint32_t ssm_value_dim() const { return ssm_state_size * ssm_time_step_rank; }  // v and z width
  uint32_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
};

Hparams preset_hparams(const Options& o);

// How a tensor's values are drawn (docs/synth.md has the reasons).
enum class Init {
  normal,       // N(0, scale²) (Irwin–Hall approximation, see init.hpp)
  writer,       // normal, but the row writing the skew channel is zero (output projections)
  router,       // normal, plus a per-expert offset in the skew channel column (ffn_gate_inp)
  embedding,    // normal, plus the constant skew channel (token_embd)
  output,       // normal; rows of unused ([PADn]) tokens scaled by 0.1 (output)
  norm,         // 1 + scale·N(0,1)
  ssm_a,        // -U(1, 16), as -exp(A_log) with A ~ U(1, 16)
  ssm_dt_bias,  // softplus⁻¹(dt), dt log-uniform in [1e-3, 1e-1]
};

struct TensorPlan {
  std::string name;
  std::vector<uint64_t> ne;  // ne[0] fastest (llama.cpp order)
  GgmlType type = GgmlType::F32;
  Init init = Init::normal;
  float scale = 0.0f;
  int layer = -1;  // block index, -1 for global tensors
  uint64_t n_bytes = 0;

  uint64_t n_elements() const;
  uint64_t row_len() const { return ne[0]; }
  uint64_t n_rows() const { return n_elements() / ne[0]; }
};

struct ModelPlan {
  Options options;
  Hparams hp;
  // Residual-stream channel that carries the router skew (see docs/synth.md); its value in every
  // embedding row and the (per layer, per expert) router column entries.
  uint32_t skew_channel = 0;
  float skew_channel_value = 0.0f;
  std::vector<std::pair<std::string, gguf::Value>> metadata;
  std::vector<TensorPlan> tensors;
  std::vector<bool> token_unused;  // (n_vocab) the [PADn] filler tokens

  uint64_t tensor_bytes() const;
  const TensorPlan* find(std::string_view name) const;
};

// Throws ferry::Error(invalid_arg/unsupported) for impossible combinations (e.g. a quant type whose
// block does not divide a row and that has no fallback Ferry can write).
ModelPlan make_plan(const Options& o);

struct WriteOptions {
  int threads = 0;  // 0: all hardware threads
  // Called from the writing thread about once a second and at the end.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total, double seconds)> progress;
};

struct WriteStats {
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;
  double seconds = 0.0;
};

// Generates, quantizes and writes the model. The output bytes depend only on the plan (hence on
// Options), never on the thread count. Nothing is left at `path` if it fails.
WriteStats write_model(const ModelPlan& plan, const std::string& path, const WriteOptions& w = {});

// Values of rows [row_begin, row_end) of tensor t, as F32 (before quantization). Exposed for tests.
void generate_rows(const ModelPlan& plan, const TensorPlan& t, uint64_t row_begin,
                   uint64_t row_end, float* out);

}  // namespace ferry::synth
