// The plan (tensor table, metadata, per-tensor types) of every architecture and preset, checked
// against the shapes llama.cpp's loader creates and the types llama-quantize picks; nothing is
// written, so the real-size presets are covered too.
#include <gtest/gtest.h>

#include <map>

#include "runtime/core/error.hpp"
#include "runtime/synth/quant_mix.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

using Shape = std::vector<uint64_t>;

ModelPlan plan_of(Arch a, Preset p, QuantMix q = QuantMix::q4_k_m) {
  Options o;
  o.arch = a;
  o.preset = p;
  o.quant = q;
  o.seed = 7;
  return make_plan(o);
}

const TensorPlan& tensor(const ModelPlan& p, const std::string& name) {
  const TensorPlan* t = p.find(name);
  if (!t) throw std::runtime_error("missing tensor " + name);
  return *t;
}

const gguf::Value& meta(const ModelPlan& p, const std::string& key) {
  for (const auto& [k, v] : p.metadata)
    if (k == key) return v;
  throw std::runtime_error("missing key " + key);
}
uint64_t meta_u(const ModelPlan& p, const std::string& key) { return std::get<uint64_t>(meta(p, key).v); }
std::string meta_s(const ModelPlan& p, const std::string& key) { return std::get<std::string>(meta(p, key).v); }
bool has_meta(const ModelPlan& p, const std::string& key) {
  for (const auto& [k, v] : p.metadata)
    if (k == key) return true;
  return false;
}

TEST(SynthPlan, Qwen3Moe30bShapesAndMetadata) {
  const ModelPlan p = plan_of(Arch::qwen3moe, Preset::real);
  EXPECT_EQ(p.tensors.size(), 3u + 48u * 12u);  // the real Qwen3-30B-A3B GGUF has 579 tensors
  EXPECT_EQ(tensor(p, "token_embd.weight").ne, (Shape{2048, 151936}));
  EXPECT_EQ(tensor(p, "output.weight").ne, (Shape{2048, 151936}));
  EXPECT_EQ(tensor(p, "output_norm.weight").ne, (Shape{2048}));
  for (int il : {0, 47}) {
    const std::string b = "blk." + std::to_string(il) + ".";
    EXPECT_EQ(tensor(p, b + "attn_norm.weight").ne, (Shape{2048}));
    EXPECT_EQ(tensor(p, b + "attn_q.weight").ne, (Shape{2048, 4096}));
    EXPECT_EQ(tensor(p, b + "attn_k.weight").ne, (Shape{2048, 512}));
    EXPECT_EQ(tensor(p, b + "attn_v.weight").ne, (Shape{2048, 512}));
    EXPECT_EQ(tensor(p, b + "attn_output.weight").ne, (Shape{4096, 2048}));
    EXPECT_EQ(tensor(p, b + "attn_q_norm.weight").ne, (Shape{128}));
    EXPECT_EQ(tensor(p, b + "attn_k_norm.weight").ne, (Shape{128}));
    EXPECT_EQ(tensor(p, b + "ffn_norm.weight").ne, (Shape{2048}));
    EXPECT_EQ(tensor(p, b + "ffn_gate_inp.weight").ne, (Shape{2048, 128}));
    EXPECT_EQ(tensor(p, b + "ffn_gate_exps.weight").ne, (Shape{2048, 768, 128}));
    EXPECT_EQ(tensor(p, b + "ffn_up_exps.weight").ne, (Shape{2048, 768, 128}));
    EXPECT_EQ(tensor(p, b + "ffn_down_exps.weight").ne, (Shape{768, 2048, 128}));
  }
  EXPECT_EQ(p.find("blk.48.attn_norm.weight"), nullptr);
  EXPECT_EQ(meta_s(p, "general.architecture"), "qwen3moe");
  EXPECT_EQ(meta_u(p, "qwen3moe.block_count"), 48u);
  EXPECT_EQ(meta_u(p, "qwen3moe.context_length"), 40960u);
  EXPECT_EQ(meta_u(p, "qwen3moe.embedding_length"), 2048u);
  EXPECT_EQ(meta_u(p, "qwen3moe.feed_forward_length"), 6144u);
  EXPECT_EQ(meta_u(p, "qwen3moe.attention.head_count"), 32u);
  EXPECT_EQ(meta_u(p, "qwen3moe.attention.head_count_kv"), 4u);
  EXPECT_EQ(meta_u(p, "qwen3moe.attention.key_length"), 128u);
  EXPECT_EQ(meta_u(p, "qwen3moe.expert_count"), 128u);
  EXPECT_EQ(meta_u(p, "qwen3moe.expert_used_count"), 8u);
  EXPECT_EQ(meta_u(p, "qwen3moe.expert_feed_forward_length"), 768u);
  EXPECT_EQ(std::get<double>(meta(p, "qwen3moe.rope.freq_base").v), 1e6);
  EXPECT_EQ(meta(p, "qwen3moe.attention.layer_norm_rms_epsilon").type, gguf::ValueType::f32);
  EXPECT_FALSE(has_meta(p, "qwen3moe.ssm.conv_kernel"));
  EXPECT_EQ(meta_s(p, "tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(meta_s(p, "tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(std::get<gguf::Array>(meta(p, "tokenizer.ggml.tokens").v).size(), 151936u);
  EXPECT_EQ(meta_u(p, "tokenizer.ggml.eos_token_id"), 151645u);
  EXPECT_EQ(meta_u(p, "tokenizer.ggml.padding_token_id"), 151643u);
  EXPECT_EQ(meta_u(p, "general.file_type"), 15u);
  EXPECT_EQ(meta(p, "qwen3moe.block_count").type, gguf::ValueType::u32);
}

TEST(SynthPlan, Qwen35Moe35bShapesAndMetadata) {
  const ModelPlan p = plan_of(Arch::qwen35moe, Preset::real);
  // 30 DeltaNet layers of 19 tensors, 10 attention layers of 16, plus 3 global tensors.
  EXPECT_EQ(p.tensors.size(), 3u + 30u * 19u + 10u * 16u);
  EXPECT_EQ(tensor(p, "token_embd.weight").ne, (Shape{2048, 248320}));
  // Layers 3, 7, ..., 39 are full attention; the others Gated DeltaNet.
  for (int il = 0; il < 40; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const bool attn = (il + 1) % 4 == 0;
    EXPECT_EQ(p.find(b + "attn_q.weight") != nullptr, attn) << il;
    EXPECT_EQ(p.find(b + "attn_qkv.weight") != nullptr, !attn) << il;
    EXPECT_EQ(tensor(p, b + "post_attention_norm.weight").ne, (Shape{2048}));
    EXPECT_EQ(p.find(b + "ffn_norm.weight"), nullptr);
  }
  EXPECT_EQ(tensor(p, "blk.3.attn_q.weight").ne, (Shape{2048, 8192}));  // [q | gate] x 16 heads x 256
  EXPECT_EQ(tensor(p, "blk.3.attn_k.weight").ne, (Shape{2048, 512}));
  EXPECT_EQ(tensor(p, "blk.3.attn_v.weight").ne, (Shape{2048, 512}));
  EXPECT_EQ(tensor(p, "blk.3.attn_output.weight").ne, (Shape{4096, 2048}));
  EXPECT_EQ(tensor(p, "blk.3.attn_q_norm.weight").ne, (Shape{256}));
  EXPECT_EQ(tensor(p, "blk.0.attn_qkv.weight").ne, (Shape{2048, 8192}));
  EXPECT_EQ(tensor(p, "blk.0.attn_gate.weight").ne, (Shape{2048, 4096}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_conv1d.weight").ne, (Shape{4, 8192}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_dt.bias").ne, (Shape{32}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_a").ne, (Shape{32}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_beta.weight").ne, (Shape{2048, 32}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_alpha.weight").ne, (Shape{2048, 32}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_norm.weight").ne, (Shape{128}));
  EXPECT_EQ(tensor(p, "blk.0.ssm_out.weight").ne, (Shape{4096, 2048}));
  EXPECT_EQ(tensor(p, "blk.0.ffn_gate_inp.weight").ne, (Shape{2048, 256}));
  EXPECT_EQ(tensor(p, "blk.0.ffn_gate_exps.weight").ne, (Shape{2048, 512, 256}));
  EXPECT_EQ(tensor(p, "blk.0.ffn_down_exps.weight").ne, (Shape{512, 2048, 256}));
  EXPECT_EQ(tensor(p, "blk.0.ffn_gate_inp_shexp.weight").ne, (Shape{2048}));
  EXPECT_EQ(tensor(p, "blk.0.ffn_up_shexp.weight").ne, (Shape{2048, 512}));
  EXPECT_EQ(tensor(p, "blk.0.ffn_down_shexp.weight").ne, (Shape{512, 2048}));
  EXPECT_EQ(meta_u(p, "qwen35moe.block_count"), 40u);
  EXPECT_EQ(meta_u(p, "qwen35moe.attention.head_count"), 16u);
  EXPECT_EQ(meta_u(p, "qwen35moe.attention.head_count_kv"), 2u);
  EXPECT_EQ(meta_u(p, "qwen35moe.attention.key_length"), 256u);
  EXPECT_EQ(meta_u(p, "qwen35moe.expert_count"), 256u);
  EXPECT_EQ(meta_u(p, "qwen35moe.expert_shared_feed_forward_length"), 512u);
  EXPECT_EQ(meta_u(p, "qwen35moe.ssm.conv_kernel"), 4u);
  EXPECT_EQ(meta_u(p, "qwen35moe.ssm.state_size"), 128u);
  EXPECT_EQ(meta_u(p, "qwen35moe.ssm.group_count"), 16u);
  EXPECT_EQ(meta_u(p, "qwen35moe.ssm.time_step_rank"), 32u);
  EXPECT_EQ(meta_u(p, "qwen35moe.ssm.inner_size"), 4096u);
  EXPECT_EQ(meta_u(p, "qwen35moe.full_attention_interval"), 4u);
  EXPECT_EQ(meta_u(p, "qwen35moe.rope.dimension_count"), 64u);
  EXPECT_EQ(meta_u(p, "qwen35moe.context_length"), 262144u);
  EXPECT_EQ(std::get<gguf::Array>(meta(p, "qwen35moe.rope.dimension_sections").v).ints,
            (std::vector<int64_t>{11, 11, 10, 0}));
  EXPECT_EQ(std::get<double>(meta(p, "qwen35moe.rope.freq_base").v), 1e7);
  EXPECT_FALSE(has_meta(p, "qwen35moe.feed_forward_length"));
  EXPECT_EQ(meta_s(p, "tokenizer.ggml.pre"), "qwen35");
  EXPECT_EQ(meta_u(p, "tokenizer.ggml.eos_token_id"), 248046u);
  EXPECT_EQ(meta_u(p, "tokenizer.ggml.padding_token_id"), 248044u);
}

TEST(SynthPlan, Qwen3Next80bShapesAndMetadata) {
  const ModelPlan p = plan_of(Arch::qwen3next, Preset::real);
  EXPECT_EQ(p.tensors.size(), 3u + 36u * 18u + 12u * 16u);  // ssm_ba fuses beta and alpha
  EXPECT_EQ(tensor(p, "blk.0.ssm_ba.weight").ne, (Shape{2048, 64}));
  EXPECT_EQ(p.find("blk.0.ssm_beta.weight"), nullptr);
  EXPECT_EQ(tensor(p, "blk.0.ffn_gate_exps.weight").ne, (Shape{2048, 512, 512}));
  EXPECT_EQ(tensor(p, "blk.47.attn_q.weight").ne, (Shape{2048, 8192}));
  EXPECT_EQ(meta_u(p, "qwen3next.block_count"), 48u);
  EXPECT_EQ(meta_u(p, "qwen3next.expert_count"), 512u);
  EXPECT_EQ(meta_u(p, "qwen3next.expert_used_count"), 10u);
  EXPECT_EQ(meta_u(p, "qwen3next.feed_forward_length"), 5120u);
  EXPECT_FALSE(has_meta(p, "qwen3next.rope.dimension_sections"));
  EXPECT_EQ(meta_s(p, "tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(meta_u(p, "tokenizer.ggml.eos_token_id"), 151645u);
}

TEST(SynthPlan, RealSizesMatchPublishedFiles) {
  // Published Q4_K_M files: Qwen3-30B-A3B 18.6 GB; our mix is llama.cpp's default Q4_K_M.
  const double q3 = plan_of(Arch::qwen3moe, Preset::real).tensor_bytes() / 1e9;
  EXPECT_GT(q3, 17.5);
  EXPECT_LT(q3, 19.5);
  const double q35 = plan_of(Arch::qwen35moe, Preset::real).tensor_bytes() / 1e9;
  EXPECT_GT(q35, 19.0);
  EXPECT_LT(q35, 23.0);
  for (Arch a : {Arch::qwen3moe, Arch::qwen35moe, Arch::qwen3next}) {
    const double small = plan_of(a, Preset::small).tensor_bytes() / 1e9;
    EXPECT_GT(small, 1.0) << arch_name(a);
    EXPECT_LT(small, 2.0) << arch_name(a);
    // qwen3moe tiny is 4.7 MB; the hybrids carry a shared expert and, with exactly 8 experts,
    // llama.cpp's Q8_0 attn_qkv: 5.4 MB.
    const double tiny = plan_of(a, Preset::tiny).tensor_bytes() / 1e6;
    EXPECT_LT(tiny, a == Arch::qwen3moe ? 5.0 : 5.6) << arch_name(a);
  }
}

TEST(SynthPlan, Q4KMTypesFollowLlamaQuantize) {
  const ModelPlan p = plan_of(Arch::qwen3moe, Preset::real, QuantMix::q4_k_m);
  EXPECT_EQ(tensor(p, "token_embd.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(tensor(p, "output.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(tensor(p, "output_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(tensor(p, "blk.5.ffn_gate_inp.weight").type, GgmlType::F32);
  EXPECT_EQ(tensor(p, "blk.5.attn_q_norm.weight").type, GgmlType::F32);
  // use_more_bits(i, 48): i < 6, i >= 42, or (i - 6) % 3 == 2.
  for (int il = 0; il < 48; ++il) {
    const bool more = il < 6 || il >= 42 || (il - 6) % 3 == 2;
    const std::string b = "blk." + std::to_string(il) + ".";
    const GgmlType want = more ? GgmlType::Q6_K : GgmlType::Q4_K;
    EXPECT_EQ(tensor(p, b + "attn_v.weight").type, want) << il;
    EXPECT_EQ(tensor(p, b + "ffn_down_exps.weight").type, want) << il;
    EXPECT_EQ(tensor(p, b + "ffn_gate_exps.weight").type, GgmlType::Q4_K) << il;
    EXPECT_EQ(tensor(p, b + "attn_k.weight").type, GgmlType::Q4_K) << il;
    EXPECT_EQ(tensor(p, b + "attn_output.weight").type, GgmlType::Q4_K) << il;
  }
  // DeltaNet: attn_qkv counts as attn_v; the small ssm_* vectors and the conv stay F32.
  const ModelPlan q = plan_of(Arch::qwen35moe, Preset::real, QuantMix::q5_k_m);
  EXPECT_EQ(tensor(q, "blk.0.attn_qkv.weight").type, GgmlType::Q6_K);   // layer 0 < 40/8
  EXPECT_EQ(tensor(q, "blk.5.attn_qkv.weight").type, GgmlType::Q5_K);   // (5-5)%3 != 2
  EXPECT_EQ(tensor(q, "blk.7.attn_v.weight").type, GgmlType::Q6_K);     // (7-5)%3 == 2
  EXPECT_EQ(tensor(q, "blk.0.attn_gate.weight").type, GgmlType::Q5_K);
  EXPECT_EQ(tensor(q, "blk.0.ssm_conv1d.weight").type, GgmlType::F32);
  EXPECT_EQ(tensor(q, "blk.0.ssm_a").type, GgmlType::F32);
  EXPECT_EQ(tensor(q, "blk.0.ssm_dt.bias").type, GgmlType::F32);
  EXPECT_EQ(tensor(q, "blk.0.ssm_alpha.weight").type, GgmlType::Q5_K);
  EXPECT_EQ(tensor(q, "blk.0.ffn_gate_inp_shexp.weight").type, GgmlType::F32);
  EXPECT_EQ(tensor(q, "blk.0.ffn_down_shexp.weight").type, GgmlType::Q6_K);  // ffn_down, layer 0
  EXPECT_EQ(tensor(q, "token_embd.weight").type, GgmlType::Q5_K);
}

TEST(SynthPlan, OtherMixes) {
  const ModelPlan f16 = plan_of(Arch::qwen35moe, Preset::tiny, QuantMix::f16);
  EXPECT_EQ(tensor(f16, "blk.0.attn_qkv.weight").type, GgmlType::F16);
  EXPECT_EQ(tensor(f16, "output.weight").type, GgmlType::F16);
  EXPECT_EQ(tensor(f16, "blk.0.ffn_gate_inp.weight").type, GgmlType::F32);
  EXPECT_EQ(tensor(f16, "blk.0.ssm_conv1d.weight").type, GgmlType::F32);
  EXPECT_EQ(meta_u(f16, "general.file_type"), 1u);
  const ModelPlan f32 = plan_of(Arch::qwen3moe, Preset::tiny, QuantMix::f32);
  for (const auto& t : f32.tensors) EXPECT_EQ(t.type, GgmlType::F32) << t.name;
  // Exactly 8 experts triggers llama.cpp's Mixtral rule: attn_v and attn_k in Q8_0.
  const ModelPlan q6 = plan_of(Arch::qwen3moe, Preset::tiny, QuantMix::q6_k);
  EXPECT_EQ(tensor(q6, "blk.1.attn_v.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(tensor(q6, "blk.1.attn_k.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(tensor(q6, "blk.1.attn_q.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(tensor(q6, "output.weight").type, GgmlType::Q6_K);
  const ModelPlan q4 = plan_of(Arch::qwen3moe, Preset::tiny, QuantMix::q4_k_m);
  EXPECT_EQ(tensor(q4, "blk.1.attn_output.weight").type, GgmlType::Q5_K);
  const ModelPlan q8 = plan_of(Arch::qwen3next, Preset::tiny, QuantMix::q8_0);
  EXPECT_EQ(tensor(q8, "output.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(tensor(q8, "blk.0.ssm_ba.weight").type, GgmlType::Q8_0);
  for (const auto& t : q8.tensors)
    EXPECT_EQ(t.n_bytes, row_bytes(t.type, t.ne[0]) * t.n_rows()) << t.name;
}

TEST(SynthPlan, TinyHasBothLayerKindsAndKQuantRows) {
  for (Arch a : {Arch::qwen3moe, Arch::qwen35moe, Arch::qwen3next}) {
    const ModelPlan p = plan_of(a, Preset::tiny, QuantMix::q4_k_m);
    EXPECT_EQ(p.hp.n_layer, 4u);
    for (const auto& t : p.tensors) {
      if (t.ne.size() >= 2 && t.type != GgmlType::F32) {
        EXPECT_EQ(t.ne[0] % 256, 0u) << t.name;
      }
    }
    if (a != Arch::qwen3moe) {
      EXPECT_NE(p.find("blk.0.attn_qkv.weight"), nullptr);
      EXPECT_NE(p.find("blk.3.attn_q.weight"), nullptr);
    }
    EXPECT_EQ(std::get<gguf::Array>(meta(p, "tokenizer.ggml.tokens").v).size(), p.hp.n_vocab);
  }
}

TEST(SynthPlan, ShapeFallbacksFollowLlamaQuantize) {
  Hparams hp;
  hp.n_layer = 16;
  hp.n_expert = 4;
  auto one = [](std::string name, std::vector<uint64_t> ne, int layer) {
    TensorPlan t;
    t.name = std::move(name);
    t.ne = std::move(ne);
    t.layer = layer;
    return std::vector<TensorPlan>{t};
  };
  // Q6_K on a row of 96 falls back to Q8_0; the output matrix too.
  auto v = one("blk.1.attn_q.weight", {96, 64}, 1);
  assign_types(v, hp, QuantMix::q6_k);
  EXPECT_EQ(v[0].type, GgmlType::Q8_0);
  v = one("output.weight", {96, 1000}, -1);
  assign_types(v, hp, QuantMix::q4_k_m);
  EXPECT_EQ(v[0].type, GgmlType::Q8_0);
  // Q4_K falls back to Q5_0, Q5_K to Q5_1 (both have CPU kernels and reference quantizers).
  v = one("blk.1.ffn_gate_exps.weight", {96, 64, 4}, 1);
  assign_types(v, hp, QuantMix::q4_k_m);
  EXPECT_EQ(v[0].type, GgmlType::Q5_0);
  v = one("blk.1.ffn_gate_exps.weight", {96, 64, 4}, 1);
  assign_types(v, hp, QuantMix::q5_k_m);
  EXPECT_EQ(v[0].type, GgmlType::Q5_1);
  // A 32-value block type has nothing smaller: a row of 40 becomes F16.
  v = one("blk.1.attn_q.weight", {40, 64}, 1);
  assign_types(v, hp, QuantMix::q8_0);
  EXPECT_EQ(v[0].type, GgmlType::F16);
  // 1-D and router tensors are never quantized, whatever their length.
  v = one("blk.1.ffn_gate_inp.weight", {96, 4}, 1);
  assign_types(v, hp, QuantMix::q4_k_m);
  EXPECT_EQ(v[0].type, GgmlType::F32);
}

TEST(SynthPlan, OverridesAndErrors) {
  Options o;
  o.arch = Arch::qwen35moe;
  o.n_layer = 16;
  o.n_expert = 4;
  o.n_expert_used = 2;
  const ModelPlan p = make_plan(o);
  EXPECT_EQ(meta_u(p, "qwen35moe.block_count"), 16u);
  EXPECT_EQ(tensor(p, "blk.15.ffn_gate_exps.weight").ne, (Shape{256, 256, 4}));
  EXPECT_NE(p.find("blk.15.attn_q.weight"), nullptr);

  Options bad = o;
  bad.n_expert_used = 5;
  EXPECT_THROW(make_plan(bad), Error);
  bad = o;
  bad.n_layer = 3;  // no full-attention layer
  EXPECT_THROW(make_plan(bad), Error);
  bad = o;
  bad.router_skew = -1.0f;
  EXPECT_THROW(make_plan(bad), Error);
  EXPECT_FALSE(preset_from_name(Arch::qwen3moe, "35b-a3b"));
  EXPECT_EQ(preset_from_name(Arch::qwen35moe, "35b-a3b"), Preset::real);
  EXPECT_EQ(quant_mix_from_name("q4_k_m"), QuantMix::q4_k_m);
  EXPECT_EQ(quant_mix_from_name("q3_k_m"), QuantMix::q3_k_m);
  EXPECT_FALSE(quant_mix_from_name("q2_k_s"));  // llama.cpp has it; synth does not (imatrix)
  EXPECT_FALSE(quant_mix_from_name("Q4_K_M"));
}

// --expert-types: per-layer / per-projection expert types over the mix.
GgmlType type_of(const ModelPlan& p, int layer, const char* proj) {
  return tensor(p, "blk." + std::to_string(layer) + ".ffn_" + proj + "_exps.weight").type;
}

TEST(SynthPlan, ExpertTypesByLayerAndProjection) {
  Options o;
  o.arch = Arch::qwen35moe;
  o.preset = Preset::real;
  o.quant = QuantMix::q4_k_m;
  o.expert_types = "0-4:q6_k,5-9:q5_k,10-29:q4_k,30-34:q5_k,35-39:q6_k";  // APEX-like
  const ModelPlan apex = make_plan(o);
  for (const auto& [l, t] : std::vector<std::pair<int, GgmlType>>{{0, GgmlType::Q6_K},
                                                                  {4, GgmlType::Q6_K},
                                                                  {5, GgmlType::Q5_K},
                                                                  {10, GgmlType::Q4_K},
                                                                  {29, GgmlType::Q4_K},
                                                                  {30, GgmlType::Q5_K},
                                                                  {39, GgmlType::Q6_K}})
    for (const char* proj : {"gate", "up", "down"})
      EXPECT_EQ(type_of(apex, l, proj), t) << l << " " << proj;
  EXPECT_EQ(meta_s(apex, "ferry.synth.expert_types"), o.expert_types);
  // Only the routed experts change.
  const ModelPlan base = make_plan([&] {
    Options x = o;
    x.expert_types.clear();
    return x;
  }());
  EXPECT_FALSE(has_meta(base, "ferry.synth.expert_types"));
  EXPECT_EQ(tensor(apex, "blk.0.ffn_down_shexp.weight").type,
            tensor(base, "blk.0.ffn_down_shexp.weight").type);
  EXPECT_EQ(type_of(base, 10, "down"), GgmlType::Q6_K);  // llama.cpp's use_more_bits layer
  EXPECT_EQ(type_of(base, 11, "down"), GgmlType::Q4_K);
  for (const TensorPlan& t : apex.tensors)
    EXPECT_EQ(t.n_bytes, row_bytes(t.type, t.ne[0]) * t.n_rows()) << t.name;

  // Per projection (Unsloth UD-like), all layers; a rule without layers takes the previous rule's.
  Options tiny_o;
  tiny_o.quant = QuantMix::f32;
  tiny_o.expert_types = "gate_up=q4_k,down=q5_k,3:q8_0,1-2:down=q6_k,gate_up=f16";
  const ModelPlan p = make_plan(tiny_o);
  EXPECT_EQ(type_of(p, 0, "gate"), GgmlType::Q4_K);
  EXPECT_EQ(type_of(p, 0, "up"), GgmlType::Q4_K);
  EXPECT_EQ(type_of(p, 0, "down"), GgmlType::Q5_K);
  for (const char* proj : {"gate", "up", "down"}) EXPECT_EQ(type_of(p, 3, proj), GgmlType::Q8_0);
  EXPECT_EQ(type_of(p, 1, "down"), GgmlType::Q6_K);
  EXPECT_EQ(type_of(p, 2, "gate"), GgmlType::F16);
  EXPECT_EQ(type_of(p, 2, "up"), GgmlType::F16);
  EXPECT_EQ(tensor(p, "blk.0.attn_q.weight").type, GgmlType::F32);  // the mix's
}

TEST(SynthPlan, ExpertTypesErrorsNameTheProblem) {
  const auto error_of = [](const std::string& spec) -> std::string {
    Options o;
    o.expert_types = spec;
    try {
      (void)make_plan(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_arg) << spec;
      return e.what();
    }
    return "no error";
  };
  for (const auto& [spec, says] : std::vector<std::pair<std::string, std::string>>{
           {"gate=q4_k", "gate and up must share a type"},
           {"0-1:up=q6_k", "gate and up must share a type"},
           {"0-9:q4_k", "layer 9 is out of range: the model has layers 0-3"},
           {"3-1:q4_k", "runs backwards"},
           {"x:q4_k", "are not N, N-M or *"},
           {"iq3_s", "type 'iq3_s' is not one the synthesizer writes"},
           {"q8_k", "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, mxfp4, "
                    "iq4_nl, iq4_xs"},
           {"Q4_K", "type 'Q4_K' is not one the synthesizer writes"},
           {"ffn=q4_k", "unknown projection 'ffn'"},
           {"q4_k,,q6_k", "empty rule"},
           {"q4_k,", "empty rule"}}) {
    const std::string m = error_of(spec);
    EXPECT_NE(m.find(says), std::string::npos) << spec << ": " << m;
    EXPECT_NE(m.find(spec), std::string::npos) << "names the spec: " << m;
  }
}

}  // namespace
}  // namespace ferry::synth
