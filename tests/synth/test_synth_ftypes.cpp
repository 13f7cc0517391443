// The llama.cpp file types beyond Q8_0 / Q4_K_M / Q5_K_M / Q6_K: names and LLAMA_FTYPE values, the
// per-tensor rules of llama-quant.cpp at the real shapes (the tiny ones are checked against
// llama_model_quantize in tests/oracle/test_quant_llamacpp.py), the fallbacks of the new types and
// --expert-types with them (an APEX-like IQ4_XS mix at the 35b-a3b shape).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "runtime/core/error.hpp"
#include "runtime/synth/encode.hpp"
#include "runtime/synth/quant_mix.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

ModelPlan plan_of(Arch a, QuantMix q, const std::string& expert_types = "") {
  Options o;
  o.arch = a;
  o.preset = Preset::real;
  o.quant = q;
  o.expert_types = expert_types;
  return make_plan(o);
}

GgmlType type_of(const ModelPlan& p, const std::string& name) {
  const TensorPlan* t = p.find(name);
  if (!t) throw std::runtime_error("missing tensor " + name);
  return t->type;
}
GgmlType type_of(const ModelPlan& p, int layer, const std::string& what) {
  return type_of(p, "blk." + std::to_string(layer) + "." + what + ".weight");
}

uint64_t file_type(const ModelPlan& p) {
  for (const auto& [k, v] : p.metadata)
    if (k == "general.file_type") return std::get<uint64_t>(v.v);
  throw std::runtime_error("no general.file_type");
}

TEST(SynthFtypes, NamesAndLlamaFileTypes) {
  const std::vector<std::pair<std::string, uint32_t>> want = {
      {"f32", 0},     {"f16", 1},     {"q4_0", 2},    {"q4_1", 3},    {"q8_0", 7},
      {"q5_0", 8},    {"q5_1", 9},    {"q2_k", 10},   {"q3_k_s", 11}, {"q3_k_m", 12},
      {"q3_k_l", 13}, {"q4_k_s", 14}, {"q4_k_m", 15}, {"q5_k_s", 16}, {"q5_k_m", 17},
      {"q6_k", 18},   {"iq4_nl", 25}, {"iq4_xs", 30}, {"mxfp4_moe", 38}};
  std::string names;
  for (const auto& [name, ftype] : want) {
    const auto q = quant_mix_from_name(name);
    ASSERT_TRUE(q) << name;
    EXPECT_EQ(quant_mix_name(*q), name);
    EXPECT_EQ(llama_file_type(*q), ftype) << name;
    names += (names.empty() ? "" : ", ") + name;
  }
  EXPECT_EQ(quant_mix_names(), names);
  // NVFP4: the pinned llama.cpp cannot write it (no default type for LLAMA_FTYPE_MOSTLY_NVFP4).
  for (const char* bad : {"nvfp4", "q3_k", "q4_k", "iq3_xs", "q2_k_s", "bf16", ""})
    EXPECT_FALSE(quant_mix_from_name(bad)) << bad;
}

TEST(SynthFtypes, KQuantMixesAtRealShapes) {
  // Qwen3-30B-A3B: 48 layers, GQA 8, 128 experts (no Mixtral rule).
  const ModelPlan m = plan_of(Arch::qwen3moe, QuantMix::q3_k_m);
  EXPECT_EQ(file_type(m), 12u);
  EXPECT_EQ(type_of(m, "token_embd.weight"), GgmlType::Q3_K);
  EXPECT_EQ(type_of(m, "output.weight"), GgmlType::Q6_K);
  for (int il = 0; il < 48; ++il) {
    EXPECT_EQ(type_of(m, il, "attn_v"), il < 2 ? GgmlType::Q5_K : GgmlType::Q4_K) << il;
    EXPECT_EQ(type_of(m, il, "ffn_down_exps"), il < 3 ? GgmlType::Q5_K : GgmlType::Q4_K) << il;
    EXPECT_EQ(type_of(m, il, "attn_output"), GgmlType::Q4_K) << il;
    EXPECT_EQ(type_of(m, il, "attn_k"), GgmlType::Q3_K) << il;
    EXPECT_EQ(type_of(m, il, "ffn_gate_exps"), GgmlType::Q3_K) << il;
  }
  const ModelPlan l = plan_of(Arch::qwen3moe, QuantMix::q3_k_l);
  EXPECT_EQ(type_of(l, 20, "attn_v"), GgmlType::Q5_K);
  EXPECT_EQ(type_of(l, 20, "ffn_down_exps"), GgmlType::Q5_K);
  EXPECT_EQ(type_of(l, 20, "attn_output"), GgmlType::Q5_K);
  EXPECT_EQ(type_of(l, 20, "attn_q"), GgmlType::Q3_K);
  const ModelPlan s = plan_of(Arch::qwen3moe, QuantMix::q3_k_s);
  EXPECT_EQ(type_of(s, 0, "attn_v"), GgmlType::Q3_K);
  EXPECT_EQ(type_of(s, 0, "ffn_down_exps"), GgmlType::Q3_K);
  const ModelPlan q2 = plan_of(Arch::qwen3moe, QuantMix::q2_k);
  EXPECT_EQ(type_of(q2, 7, "attn_v"), GgmlType::Q4_K);  // GQA >= 4
  EXPECT_EQ(type_of(q2, 7, "ffn_down_exps"), GgmlType::Q3_K);
  EXPECT_EQ(type_of(q2, 7, "attn_output"), GgmlType::Q3_K);
  EXPECT_EQ(type_of(q2, 7, "ffn_up_exps"), GgmlType::Q2_K);
  const ModelPlan ks = plan_of(Arch::qwen3moe, QuantMix::q4_k_s);
  for (int il = 0; il < 48; ++il) {
    EXPECT_EQ(type_of(ks, il, "attn_v"), il < 4 ? GgmlType::Q5_K : GgmlType::Q4_K) << il;
    EXPECT_EQ(type_of(ks, il, "ffn_down_exps"), il < 6 ? GgmlType::Q5_K : GgmlType::Q4_K) << il;
  }
  const ModelPlan k5 = plan_of(Arch::qwen3moe, QuantMix::q5_k_s);
  EXPECT_EQ(type_of(k5, 0, "attn_v"), GgmlType::Q5_K);
  EXPECT_EQ(type_of(k5, 0, "ffn_down_exps"), GgmlType::Q5_K);
  EXPECT_EQ(type_of(k5, "output.weight"), GgmlType::Q6_K);
}

TEST(SynthFtypes, LegacyAndIq4MixesAtRealShapes) {
  for (QuantMix q : {QuantMix::q4_0, QuantMix::q4_1, QuantMix::q5_0, QuantMix::q5_1}) {
    const ModelPlan p = plan_of(Arch::qwen35moe, q);
    const GgmlType base = type_of(p, "token_embd.weight");
    EXPECT_EQ(type_of(p, "output.weight"), GgmlType::Q6_K) << quant_mix_name(q);
    for (const char* what : {"attn_qkv", "ffn_down_exps", "ffn_gate_exps", "ssm_out", "ffn_down_shexp"})
      EXPECT_EQ(type_of(p, 0, what), base) << quant_mix_name(q) << " " << what;
    EXPECT_EQ(type_of(p, 3, "attn_v"), base);
  }
  // Qwen3.5-35B-A3B: 40 layers, GQA 8: attn_v / attn_qkv Q5_K, ffn_down Q5_K on layers < 5.
  const ModelPlan xs = plan_of(Arch::qwen35moe, QuantMix::iq4_xs);
  EXPECT_EQ(file_type(xs), 30u);
  EXPECT_EQ(type_of(xs, "token_embd.weight"), GgmlType::IQ4_XS);
  EXPECT_EQ(type_of(xs, "output.weight"), GgmlType::Q6_K);
  for (int il = 0; il < 40; ++il) {
    EXPECT_EQ(type_of(xs, il, il % 4 == 3 ? "attn_v" : "attn_qkv"), GgmlType::Q5_K) << il;
    EXPECT_EQ(type_of(xs, il, "ffn_down_exps"), il < 5 ? GgmlType::Q5_K : GgmlType::IQ4_XS) << il;
    EXPECT_EQ(type_of(xs, il, "ffn_up_exps"), GgmlType::IQ4_XS) << il;
  }
  const ModelPlan nl = plan_of(Arch::qwen3next, QuantMix::iq4_nl);
  EXPECT_EQ(type_of(nl, 10, "ssm_ba"), GgmlType::IQ4_NL);
  EXPECT_EQ(type_of(nl, 3, "attn_v"), GgmlType::Q5_K);
}

TEST(SynthFtypes, Mxfp4MoeOnlyRoutedExperts) {
  for (Arch a : {Arch::qwen3moe, Arch::qwen35moe, Arch::qwen3next}) {
    const ModelPlan p = plan_of(a, QuantMix::mxfp4_moe);
    EXPECT_EQ(file_type(p), 38u);
    for (const TensorPlan& t : p.tensors) {
      const bool routed = t.name.find("_exps.weight") != std::string::npos;
      if (routed)
        EXPECT_EQ(t.type, GgmlType::MXFP4) << t.name;
      else if (llama_quantizes(t))
        EXPECT_EQ(t.type, GgmlType::Q8_0) << t.name;  // output, token_embd, shared experts too
      else
        EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    }
  }
  // One expert: not "MoE" for llama.cpp (ne[2] = 1), so Q8_0.
  Options o;
  o.arch = Arch::qwen3moe;
  o.quant = QuantMix::mxfp4_moe;
  o.n_expert = 1;
  o.n_expert_used = 1;
  EXPECT_EQ(type_of(make_plan(o), 0, "ffn_gate_exps"), GgmlType::Q8_0);
}

TEST(SynthFtypes, FallbacksOfTheNewTypes) {
  Hparams hp;
  hp.n_layer = 16;
  hp.n_expert = 4;
  const auto type_for = [&](QuantMix q, std::vector<uint64_t> ne, const char* name = "blk.9.ffn_gate_exps.weight") {
    TensorPlan t;
    t.name = name;
    t.ne = std::move(ne);
    t.layer = 9;
    std::vector<TensorPlan> v{t};
    assign_types(v, hp, q);
    return v[0].type;
  };
  EXPECT_EQ(type_for(QuantMix::iq4_xs, {96, 64, 4}), GgmlType::IQ4_NL);
  EXPECT_EQ(type_for(QuantMix::q2_k, {96, 64, 4}), GgmlType::Q4_0);
  EXPECT_EQ(type_for(QuantMix::q3_k_m, {96, 64, 4}), GgmlType::Q4_0);
  EXPECT_EQ(type_for(QuantMix::q5_k_s, {96, 64, 4}), GgmlType::Q5_1);
  EXPECT_EQ(type_for(QuantMix::q4_0, {40, 64, 4}), GgmlType::F16);
  EXPECT_EQ(type_for(QuantMix::iq4_xs, {40, 64, 4}), GgmlType::F16);
  EXPECT_EQ(type_for(QuantMix::mxfp4_moe, {40, 64, 4}), GgmlType::F16);
  EXPECT_EQ(type_for(QuantMix::mxfp4_moe, {96, 64, 4}), GgmlType::MXFP4);
  // Every type a fallback produces is one synth writes.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q8_0, GgmlType::F16})
    EXPECT_TRUE(encoding_of(t)) << type_name(t);
}

TEST(SynthFtypes, ExpertTypesTakeTheNewTypes) {
  // APEX-like at the real 35b-a3b shape: Q6_K / Q5_K edges, IQ4_XS middle, Q8_0 shared expert.
  const std::string spec = "0-4:q6_k,5-9:q5_k,10-29:iq4_xs,30-34:q5_k,35-39:q6_k";
  const ModelPlan apex = plan_of(Arch::qwen35moe, QuantMix::q8_0, spec);
  for (int il = 0; il < 40; ++il) {
    const GgmlType want = il < 5 || il >= 35 ? GgmlType::Q6_K : il < 10 || il >= 30 ? GgmlType::Q5_K : GgmlType::IQ4_XS;
    for (const char* proj : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) EXPECT_EQ(type_of(apex, il, proj), want) << il;
    EXPECT_EQ(type_of(apex, il, "ffn_down_shexp"), GgmlType::Q8_0) << il;
  }
  for (const TensorPlan& t : apex.tensors) EXPECT_EQ(t.n_bytes, row_bytes(t.type, t.ne[0]) * t.n_rows()) << t.name;

  Options o;  // tiny qwen3moe, 4 layers
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "mxfp4", "bf16"}) {
    o.expert_types = std::string("1-2:gate_up=") + name + ",down=q4_k";
    const ModelPlan p = make_plan(o);
    EXPECT_EQ(type_of(p, 1, "ffn_gate_exps"), *type_from_name(name)) << name;
    EXPECT_EQ(type_of(p, 2, "ffn_up_exps"), *type_from_name(name)) << name;
    EXPECT_EQ(type_of(p, 2, "ffn_down_exps"), GgmlType::Q4_K) << name;
    EXPECT_EQ(type_of(p, 0, "ffn_gate_exps"), GgmlType::F32) << name;
  }
}

// `ferry synth` itself: a bad --quant or --expert-types type names the valid ones.
TEST(SynthFtypes, CliErrorsListTheValidNames) {
  const std::string ferry = std::string(FERRY_BINARY_DIR) + "/ferry";
  if (!std::filesystem::exists(ferry)) GTEST_SKIP() << ferry << " not built";
  const auto run = [&](const std::string& args, int& status) {
    std::string out;
    FILE* p = popen((ferry + " synth " + args + " --plan 2>&1").c_str(), "r");
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int st = pclose(p);
    status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
  };
  int status = 0;
  std::string out = run("--quant nvfp4", status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("unknown --quant 'nvfp4'"), std::string::npos) << out;
  EXPECT_NE(out.find(quant_mix_names()), std::string::npos) << out;
  out = run("--quant q4_k_m --expert-types 2:iq3_s", status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("type 'iq3_s' is not one the synthesizer writes (" + writable_type_names() + ")"),
            std::string::npos) << out;
  out = run("--arch qwen35moe --preset 35b-a3b --quant q8_0 --expert-types 0-4:q6_k,5-9:q5_k,10-29:iq4_xs", status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("IQ4_XS"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry::synth
