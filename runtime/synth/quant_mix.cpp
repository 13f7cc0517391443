#include "runtime/synth/quant_mix.hpp"

#include <array>
#include <string>

#include "runtime/core/error.hpp"
#include "runtime/synth/encode.hpp"

namespace ferry::synth {
namespace {

struct MixInfo {
  QuantMix mix;
  std::string_view name;  // llama-quantize's name, lower case
  uint32_t llama_ftype;   // LLAMA_FTYPE_* (llama.h)
  GgmlType default_type;  // llama_ftype_get_default_type
};

// In LLAMA_FTYPE order.
constexpr std::array<MixInfo, 19> kMixes = {{
    {QuantMix::f32, "f32", 0, GgmlType::F32},
    {QuantMix::f16, "f16", 1, GgmlType::F16},
    {QuantMix::q4_0, "q4_0", 2, GgmlType::Q4_0},
    {QuantMix::q4_1, "q4_1", 3, GgmlType::Q4_1},
    {QuantMix::q8_0, "q8_0", 7, GgmlType::Q8_0},
    {QuantMix::q5_0, "q5_0", 8, GgmlType::Q5_0},
    {QuantMix::q5_1, "q5_1", 9, GgmlType::Q5_1},
    {QuantMix::q2_k, "q2_k", 10, GgmlType::Q2_K},
    {QuantMix::q3_k_s, "q3_k_s", 11, GgmlType::Q3_K},
    {QuantMix::q3_k_m, "q3_k_m", 12, GgmlType::Q3_K},
    {QuantMix::q3_k_l, "q3_k_l", 13, GgmlType::Q3_K},
    {QuantMix::q4_k_s, "q4_k_s", 14, GgmlType::Q4_K},
    {QuantMix::q4_k_m, "q4_k_m", 15, GgmlType::Q4_K},
    {QuantMix::q5_k_s, "q5_k_s", 16, GgmlType::Q5_K},
    {QuantMix::q5_k_m, "q5_k_m", 17, GgmlType::Q5_K},
    {QuantMix::q6_k, "q6_k", 18, GgmlType::Q6_K},
    {QuantMix::iq4_nl, "iq4_nl", 25, GgmlType::IQ4_NL},
    {QuantMix::iq4_xs, "iq4_xs", 30, GgmlType::IQ4_XS},
    {QuantMix::mxfp4_moe, "mxfp4_moe", 38, GgmlType::MXFP4},
}};

const MixInfo& info(QuantMix q) {
  for (const MixInfo& m : kMixes)
    if (m.mix == q) return m;
  fail(ErrorKind::internal, "unknown quant mix {}", static_cast<int>(q));
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama-quant.cpp tensor_get_category, in its order of tests.
enum class Category { token_embd, attn_q, attn_v, attn_k, attn_qkv, attn_output, ffn_up, ffn_gate, ffn_down, output, other };

Category category(const std::string& name) {
  if (name == "output.weight") return Category::output;
  if (name == "token_embd.weight") return Category::token_embd;
  if (contains(name, "attn_qkv.weight")) return Category::attn_qkv;
  if (contains(name, "attn_v.weight")) return Category::attn_v;
  if (contains(name, "attn_k.weight")) return Category::attn_k;
  if (contains(name, "attn_q.weight")) return Category::attn_q;
  if (contains(name, "attn_output.weight")) return Category::attn_output;
  if (contains(name, "ffn_up")) return Category::ffn_up;
  if (contains(name, "ffn_gate")) return Category::ffn_gate;
  if (contains(name, "ffn_down")) return Category::ffn_down;
  return Category::other;
}

// attn_v-like tensors are the ones llama.cpp gives more bits (category_is_attn_v). attn_qkv is one,
// so llama.cpp's separate attn_qkv branch is never reached.
bool is_attn_v_like(Category c) { return c == Category::attn_v || c == Category::attn_qkv; }

// llama-quant.cpp use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

bool is_quantized(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

// llama-quant.cpp tensor_type_fallback: a row length the block does not divide.
GgmlType fallback(const TensorPlan& t, GgmlType target) {
  const uint64_t ncols = t.ne[0];
  const uint32_t block = type_info(target).block_values;
  if (ncols % block == 0) return target;
  GgmlType r;
  switch (target) {
    case GgmlType::IQ4_XS: r = GgmlType::IQ4_NL; break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: r = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: r = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: r = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: r = GgmlType::Q8_0; break;
    default:
      // A 32-value block type has nothing smaller to fall back to: F16 below.
      if (block <= 32) {
        r = target;
        break;
      }
      fail(ErrorKind::unsupported, "tensor {}: row length {} is not a multiple of the {} block and "
           "llama.cpp defines no fallback", t.name, ncols, type_name(target));
  }
  if (ncols % type_info(r).block_values != 0) r = GgmlType::F16;
  return r;
}

// llama_model_quantize_impl's counters, in tensor order.
struct Counters {
  int n_attention_wv = 0;  // attn_v-like tensors in the model
  int i_attention_wv = 0;  // attn_v-like tensors seen so far
  int i_ffn_down = 0;      // ffn_down tensors seen so far (the layer when n_expert <= 1)
};

// The part of llama_tensor_get_type_impl these architectures reach: no tied embeddings (every preset
// writes output.weight), no Falcon, no 70B model type, no imatrix, and none of the IQ1/IQ2/IQ3/TQ
// file types. Mixtral's rules (exactly 8 experts) do apply to the tiny presets.
GgmlType mixed_type(const TensorPlan& t, Category cat, const Hparams& hp, QuantMix mix, Counters& c) {
  using enum QuantMix;
  GgmlType type = info(mix).default_type;
  const bool mixtral = hp.n_expert == 8;
  const uint32_t n_gqa = hp.n_head_kv ? hp.n_head / hp.n_head_kv : 0;  // hparams.n_gqa() (layer 0)
  if (cat == Category::output) {
    if (mix == mxfp4_moe || t.ne[0] % type_info(type).block_values != 0) return GgmlType::Q8_0;
    return type == GgmlType::Q8_0 ? type : GgmlType::Q6_K;
  }
  // MXFP4_MOE: the routed experts (3-D, more than one expert) MXFP4, everything else Q8_0.
  if (mix == mxfp4_moe) return t.ne.size() > 2 && t.ne[2] > 1 ? GgmlType::MXFP4 : GgmlType::Q8_0;
  if (cat == Category::token_embd) return type;
  if (is_attn_v_like(cat)) {
    switch (mix) {
      case q2_k: type = n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K; break;
      case q3_k_m: type = c.i_attention_wv < 2 ? GgmlType::Q5_K : GgmlType::Q4_K; break;
      case q3_k_l: type = GgmlType::Q5_K; break;
      case iq4_nl:
      case iq4_xs:
        if (n_gqa >= 4) type = GgmlType::Q5_K;
        break;
      case q4_k_m:
      case q5_k_m:
        if (use_more_bits(c.i_attention_wv, c.n_attention_wv)) type = GgmlType::Q6_K;
        break;
      case q4_k_s:
        if (c.i_attention_wv < 4) type = GgmlType::Q5_K;
        break;
      default: break;
    }
    if (mixtral) type = GgmlType::Q8_0;
    ++c.i_attention_wv;
    return type;
  }
  if (cat == Category::attn_k) return mixtral ? GgmlType::Q8_0 : type;
  if (cat == Category::ffn_down) {
    // With several experts llama.cpp takes the layer from the name (= t.layer); with one, from its
    // count of ffn_down tensors. The layer count is the number of blocks (no MTP block here).
    const int i_layer = hp.n_expert > 1 ? t.layer : c.i_ffn_down;
    const int n_layer = static_cast<int>(hp.n_layer);
    ++c.i_ffn_down;
    switch (mix) {
      case q2_k: type = GgmlType::Q3_K; break;
      case q3_k_m: type = i_layer < n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K; break;
      case q3_k_l: type = GgmlType::Q5_K; break;
      case q4_k_m:
      case q5_k_m:
        if (use_more_bits(i_layer, n_layer)) type = GgmlType::Q6_K;
        break;
      case iq4_nl:
      case iq4_xs:
      case q4_k_s:
        if (i_layer < n_layer / 8) type = GgmlType::Q5_K;
        break;
      default: break;
    }
    return type;
  }
  if (cat == Category::attn_output) {
    if (mixtral) {
      switch (mix) {
        case q2_k: case q3_k_s: case q3_k_m: case iq4_nl: case q4_k_s: case q4_k_m: case iq4_xs:
          type = GgmlType::Q5_K;
          break;
        default: break;
      }
    } else if (mix == q2_k) {
      type = GgmlType::Q3_K;
    } else if (mix == q3_k_m) {
      type = GgmlType::Q4_K;
    } else if (mix == q3_k_l) {
      type = GgmlType::Q5_K;
    }
    return type;
  }
  return type;  // attn_q, ffn_gate / ffn_up (only IQ3_XS changes them), the rest
}

}  // namespace

std::string_view quant_mix_name(QuantMix q) { return info(q).name; }

std::optional<QuantMix> quant_mix_from_name(std::string_view s) {
  for (const MixInfo& m : kMixes)
    if (m.name == s) return m.mix;
  return std::nullopt;
}

std::string quant_mix_names() {
  std::string s;
  for (const MixInfo& m : kMixes) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

uint32_t llama_file_type(QuantMix q) { return info(q).llama_ftype; }

bool llama_quantizes(const TensorPlan& t) {
  if (t.ne.size() < 2) return false;
  const std::string& n = t.name;
  if (!ends_with(n, "weight")) return false;
  if (contains(n, "_norm.weight")) return false;
  if (contains(n, "ffn_gate_inp.weight")) return false;
  if (contains(n, "ssm_conv1d")) return false;
  return true;
}

void assign_types(std::vector<TensorPlan>& tensors, const Hparams& hp, QuantMix mix) {
  Counters c;
  for (const auto& t : tensors)
    if (is_attn_v_like(category(t.name))) ++c.n_attention_wv;
  const GgmlType default_type = info(mix).default_type;
  for (auto& t : tensors) {
    // convert_hf_to_gguf.py: 1-D tensors, the router and the conv kernel stay F32.
    GgmlType base = mix == QuantMix::f32 ? GgmlType::F32 : GgmlType::F16;
    if (t.ne.size() < 2 || contains(t.name, "ffn_gate_inp.weight") || contains(t.name, "ssm_conv1d"))
      base = GgmlType::F32;
    GgmlType type = base;
    if (llama_quantizes(t) && is_quantized(default_type))
      type = fallback(t, mixed_type(t, category(t.name), hp, mix, c));
    if (!encoding_of(type))
      fail(ErrorKind::unsupported, "tensor {} would be {} in a {} file, which ferry synth cannot write",
           t.name, type_name(type), quant_mix_name(mix));
    t.type = type;
  }
}

}  // namespace ferry::synth
