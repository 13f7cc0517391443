#include "runtime/synth/quant_mix.hpp"

#include <string>

#include "runtime/core/error.hpp"

namespace ferry::synth {
namespace {

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

// attn_v-like tensors are the ones llama.cpp gives more bits (category_is_attn_v).
bool is_attn_v_like(Category c) { return c == Category::attn_v || c == Category::attn_qkv; }

// llama-quant.cpp use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

GgmlType default_type(QuantMix mix) {
  switch (mix) {
    case QuantMix::f32: return GgmlType::F32;
    case QuantMix::f16: return GgmlType::F16;
    case QuantMix::q8_0: return GgmlType::Q8_0;
    case QuantMix::q4_k_m: return GgmlType::Q4_K;
    case QuantMix::q5_k_m: return GgmlType::Q5_K;
    case QuantMix::q6_k: return GgmlType::Q6_K;
  }
  fail(ErrorKind::internal, "unknown quant mix");
}

bool is_quantized(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

// llama-quant.cpp tensor_type_fallback: a row length the block does not divide.
GgmlType fallback(const TensorPlan& t, GgmlType target) {
  const uint64_t ncols = t.ne[0];
  if (ncols % type_info(target).block_values == 0) return target;
  GgmlType r;
  switch (target) {
    case GgmlType::Q4_K: r = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: r = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: r = GgmlType::Q8_0; break;
    default:
      fail(ErrorKind::unsupported, "tensor {}: row length {} is not a multiple of the {} block and "
           "llama.cpp defines no fallback", t.name, ncols, type_name(target));
  }
  if (ncols % type_info(r).block_values != 0) r = GgmlType::F16;
  return r;
}

// The part of llama_tensor_get_type_impl that the Q4_K_M, Q5_K_M, Q6_K and Q8_0 file types reach
// (the IQ*, Q2_K, Q3_K branches and the Falcon / 70B special cases cannot apply here).
GgmlType mixed_type(const TensorPlan& t, Category cat, const Hparams& hp, QuantMix mix,
                    int& i_attention_wv, int n_attention_wv) {
  GgmlType type = default_type(mix);
  const bool km = mix == QuantMix::q4_k_m || mix == QuantMix::q5_k_m;
  // The output matrix (never tied here: every preset writes output.weight).
  if (cat == Category::output) {
    if (t.ne[0] % type_info(type).block_values != 0) return GgmlType::Q8_0;
    return type == GgmlType::Q8_0 ? type : GgmlType::Q6_K;
  }
  if (cat == Category::token_embd) return type;
  if (is_attn_v_like(cat)) {
    if (km && use_more_bits(i_attention_wv, n_attention_wv)) type = GgmlType::Q6_K;
    // llama.cpp's Mixtral rule: with exactly 8 experts attn_v (and attn_k) become Q8_0.
    if (hp.n_expert == 8) type = GgmlType::Q8_0;
    ++i_attention_wv;
    return type;
  }
  if (cat == Category::attn_k) return hp.n_expert == 8 ? GgmlType::Q8_0 : type;
  if (cat == Category::ffn_down) {
    // Layer from the tensor name; the count is the number of blocks (no MTP block here).
    if (km && use_more_bits(t.layer, static_cast<int>(hp.n_layer))) type = GgmlType::Q6_K;
    return type;
  }
  if (cat == Category::attn_output) {
    if (hp.n_expert == 8 && mix == QuantMix::q4_k_m) type = GgmlType::Q5_K;
    return type;
  }
  return type;
}

}  // namespace

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
  int n_attention_wv = 0;
  for (const auto& t : tensors)
    if (is_attn_v_like(category(t.name))) ++n_attention_wv;
  int i_attention_wv = 0;
  for (auto& t : tensors) {
    // convert_hf_to_gguf.py: 1-D tensors, the router and the conv kernel stay F32.
    GgmlType base = mix == QuantMix::f32 ? GgmlType::F32 : GgmlType::F16;
    if (t.ne.size() < 2 || contains(t.name, "ffn_gate_inp.weight") || contains(t.name, "ssm_conv1d"))
      base = GgmlType::F32;
    GgmlType type = base;
    if (llama_quantizes(t) && is_quantized(default_type(mix)))
      type = fallback(t, mixed_type(t, category(t.name), hp, mix, i_attention_wv, n_attention_wv));
    if (!type_info(type).compute)
      fail(ErrorKind::unsupported, "tensor {} would be {} in a {} file, which Ferry cannot write",
           t.name, type_name(type), quant_mix_name(mix));
    t.type = type;
  }
}

}  // namespace ferry::synth
