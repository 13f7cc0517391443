// Config and weight validation: every malformed model gives an ferry::Error of the right kind whose
// message names the key or tensor and the file — never a crash or a silently wrong model.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/moe/cpu_executor.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/model.hpp"
#include "runtime/synth/synth.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

void set_meta(synth::ModelPlan& p, const std::string& key, gguf::Value v) {
  for (auto& [k, val] : p.metadata)
    if (k == key) {
      val = std::move(v);
      return;
    }
  p.metadata.emplace_back(key, std::move(v));
}

void drop_meta(synth::ModelPlan& p, const std::string& key) {
  std::erase_if(p.metadata, [&](const auto& kv) { return kv.first == key; });
}

void drop_tensor(synth::ModelPlan& p, const std::string& name) {
  std::erase_if(p.tensors, [&](const auto& t) { return t.name == name; });
}

// Loads the model at path; returns the error (kind + message) or fails the test when none.
Error load_error(const std::string& path) {
  gguf::File f = gguf::File::open(path);
  CpuOps ops;
  const MoeExecutorFactory moe = [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); };
  try {
    load_model(f, ops, moe);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error loading " << path;
  return Error(ErrorKind::internal, "none");
}

void expect_error(const synth::ModelPlan& plan, const std::string& name, ErrorKind kind,
                  std::initializer_list<const char*> substrings) {
  const std::string path = test::write_plan(plan, name);
  const Error e = load_error(path);
  EXPECT_EQ(e.kind(), kind) << e.what();
  const std::string msg = e.what();
  for (const char* s : substrings) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
  EXPECT_NE(msg.find(name), std::string::npos) << "message does not name the file: " << msg;
}

class ConfigValidation : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { test::remove_scratch(); }
};

TEST_F(ConfigValidation, ValidTinyModelLoads) {
  const std::string path = test::write_plan(test::tiny_plan(), "valid");
  gguf::File f = gguf::File::open(path);
  const ModelConfig c = read_config(f);
  EXPECT_EQ(c.arch, Arch::qwen3moe);
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim_k, 64);
  EXPECT_EQ(c.n_rot, 64);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff_exp, 256);
  EXPECT_EQ(c.n_vocab, 768);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
  EXPECT_EQ(c.n_attention_layers(), 4);
}

TEST_F(ConfigValidation, UnsupportedArchitecture) {
  auto p = test::tiny_plan();
  set_meta(p, "general.architecture", gguf::Value::str("llama"));
  expect_error(p, "arch-llama", ErrorKind::unsupported, {"architecture 'llama'", "not supported", "qwen3moe"});
}

TEST_F(ConfigValidation, MissingKey) {
  auto p = test::tiny_plan();
  drop_meta(p, "qwen3moe.expert_count");
  expect_error(p, "no-expert-count", ErrorKind::format, {"qwen3moe.expert_count", "missing"});
}

TEST_F(ConfigValidation, HeadsNotAMultipleOfKvHeads) {
  auto p = test::tiny_plan();
  set_meta(p, "qwen3moe.attention.head_count_kv", gguf::Value::u32(3));
  expect_error(p, "bad-gqa", ErrorKind::format, {"head_count 4", "head_count_kv 3"});
}

TEST_F(ConfigValidation, MoreExpertsUsedThanExist) {
  auto p = test::tiny_plan();
  set_meta(p, "qwen3moe.expert_used_count", gguf::Value::u32(9));
  expect_error(p, "bad-topk", ErrorKind::format, {"expert_used_count 9"});
}

TEST_F(ConfigValidation, BadEpsilon) {
  auto p = test::tiny_plan();
  set_meta(p, "qwen3moe.attention.layer_norm_rms_epsilon", gguf::Value::f32(-1.0f));
  expect_error(p, "bad-eps", ErrorKind::format, {"layer_norm_rms_epsilon"});
}

TEST_F(ConfigValidation, MissingTensor) {
  auto p = test::tiny_plan();
  drop_tensor(p, "blk.2.ffn_down_exps.weight");
  expect_error(p, "no-down", ErrorKind::format, {"blk.2.ffn_down_exps.weight", "missing", "{256, 256, 8}"});
}

TEST_F(ConfigValidation, MisShapedTensor) {
  auto p = test::tiny_plan();
  for (auto& t : p.tensors)
    if (t.name == "blk.1.attn_q_norm.weight") t.ne = {32};
  expect_error(p, "bad-qnorm", ErrorKind::format, {"blk.1.attn_q_norm.weight", "{32}", "expected {64}"});
}

TEST_F(ConfigValidation, TiedOutputFallsBackToEmbedding) {
  auto p = test::tiny_plan();
  drop_tensor(p, "output.weight");
  const std::string path = test::write_plan(p, "tied");
  gguf::File f = gguf::File::open(path);
  CpuOps ops;
  auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); });
  auto st = m->new_state(StateOptions{32});
  std::vector<float> logits(static_cast<size_t>(m->config().n_vocab));
  const std::vector<int32_t> toks{1, 2, 3};
  m->forward(*st, toks, LogitsMode::last, logits.data());
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}

// The offload placement plans with state_footprint: it must be what new_state allocates.
TEST_F(ConfigValidation, StateFootprintIsWhatNewStateAllocates) {
  for (synth::Arch arch : {synth::Arch::qwen3moe, synth::Arch::qwen35moe, synth::Arch::qwen3next}) {
    synth::Options o;
    o.arch = arch;
    o.preset = synth::Preset::tiny;
    const std::string path = test::write_plan(synth::make_plan(o), std::string("fp-") + std::string(synth::arch_name(arch)));
    gguf::File f = gguf::File::open(path);
    CpuOps ops;
    auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); });
    for (const StateOptions so : {StateOptions{64, GgmlType::F16, GgmlType::F16, 8}, StateOptions{300, GgmlType::F32, GgmlType::F16, 512}}) {
      const StateFootprint fp = state_footprint(m->config(), so);
      const auto st = m->new_state(so);
      EXPECT_EQ(fp.kv_bytes + fp.recurrent_bytes + fp.workspace_bytes, st->bytes()) << synth::arch_name(arch);
      EXPECT_GT(fp.kv_bytes, 0u);
      EXPECT_GT(fp.workspace_bytes, 0u);
      EXPECT_EQ(fp.recurrent_bytes > 0, arch != synth::Arch::qwen3moe) << synth::arch_name(arch);
    }
  }
}

TEST_F(ConfigValidation, HandBuiltConfigValidation) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_vocab = 10;
  c.n_ctx_train = 128;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim_k = c.head_dim_v = 16;
  c.n_rot = 16;
  c.n_expert = 4;
  c.n_expert_used = 2;
  c.n_ff_exp = 32;
  c.layer_kind.assign(2, LayerKind::attention);
  EXPECT_NO_THROW(validate_config(c));
  c.n_rot = 15;
  EXPECT_THROW(validate_config(c), Error);
  c.n_rot = 16;
  c.layer_kind.pop_back();
  EXPECT_THROW(validate_config(c), Error);
}

}  // namespace
}  // namespace ferry
