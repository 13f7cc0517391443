// The hybrid models (qwen35moe, qwen3next) through the engine on tiny synthetic models: the layer
// layout from metadata, chunked prefill vs recurrent decode, batch splitting, the recurrent state
// continuing across turns, reset and prefix truncation (which a recurrent state cannot do in
// place), context-full errors, and metadata the forward must reject.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

synth::ModelPlan hybrid_plan(synth::Arch arch) {
  synth::Options o;
  o.arch = arch;
  o.preset = synth::Preset::tiny;
  o.quant = synth::QuantMix::f32;
  o.seed = 3;
  return synth::make_plan(o);
}

void set_meta(synth::ModelPlan& p, const std::string& key, gguf::Value v) {
  for (auto& [k, val] : p.metadata)
    if (k == key) {
      val = std::move(v);
      return;
    }
  p.metadata.emplace_back(key, std::move(v));
}

SessionOptions f32_cache(int64_t n_ctx = 512, int32_t n_batch = 512) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.type_k = o.type_v = GgmlType::F32;
  return o;
}

class HybridSession : public ::testing::TestWithParam<synth::Arch> {
 protected:
  static void SetUpTestSuite() {
    for (synth::Arch a : {synth::Arch::qwen35moe, synth::Arch::qwen3next}) {
      const std::string name = std::string(synth::arch_name(a)) + "-tiny-f32";
      models_[static_cast<int>(a)] = LoadedModel::load(test::write_plan(hybrid_plan(a), name)).release();
    }
  }
  static void TearDownTestSuite() {
    for (auto*& m : models_) {
      delete m;
      m = nullptr;
    }
    test::remove_scratch();
  }
  static LoadedModel& model() { return *models_[static_cast<int>(GetParam())]; }

  static std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, model().config().n_vocab - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = d(rng);
    return t;
  }
  static std::vector<float> all_logits(const std::vector<int32_t>& toks, SessionOptions o,
                                       LoadedModel* m = nullptr) {
    Session s(m ? *m : model(), o);
    std::vector<float> out(toks.size() * static_cast<size_t>(model().config().n_vocab));
    s.eval_all(toks, out.data());
    return out;
  }
  static std::vector<float> decode_logits(const std::vector<int32_t>& toks, SessionOptions o) {
    Session s(model(), o);
    const size_t V = static_cast<size_t>(model().config().n_vocab);
    std::vector<float> out(toks.size() * V);
    for (size_t i = 0; i < toks.size(); ++i) {
      const auto l = s.eval(std::span<const int32_t>(toks).subspan(i, 1));
      std::copy(l.begin(), l.end(), out.begin() + static_cast<std::ptrdiff_t>(i * V));
    }
    return out;
  }
  static inline LoadedModel* models_[3] = {};
};

TEST_P(HybridSession, LayerLayoutFromMetadata) {
  const ModelConfig& c = model().config();
  ASSERT_EQ(c.n_layer, 4);
  // full_attention_interval 4: blocks 0-2 DeltaNet, 3 attention.
  EXPECT_EQ(c.layer_kind, (std::vector<LayerKind>{LayerKind::deltanet, LayerKind::deltanet,
                                                  LayerKind::deltanet, LayerKind::attention}));
  EXPECT_GT(c.n_ff_shexp, 0);
  EXPECT_GT(c.ssm_state_size, 0);
  // The recurrent state is part of the session's memory: 3 layers × (H_v·S·S + (K−1)·conv_dim).
  Session s(model(), f32_cache(64, 8));
  const int64_t S = c.ssm_state_size, Hv = c.ssm_time_step_rank;
  const int64_t conv = 2 * int64_t{c.ssm_group_count} * S + Hv * S;
  EXPECT_GE(s.state_bytes(), static_cast<size_t>(3 * (Hv * S * S + (c.ssm_conv_kernel - 1) * conv) * 4));
}

TEST_P(HybridSession, LogitsAreFiniteAndNotFlat) {
  const auto l = all_logits(random_tokens(8, 1), f32_cache());
  const auto [lo, hi] = std::minmax_element(l.begin(), l.end());
  for (float v : l) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(*hi - *lo, 0.1f);
}

TEST_P(HybridSession, ChunkedPrefillMatchesRecurrentDecode) {
  const auto toks = random_tokens(300, 2);
  const size_t V = static_cast<size_t>(model().config().n_vocab);
  const auto dec = decode_logits(toks, f32_cache());
  // The prefill form is the backend's option (CpuOpsOptions::gdn_prefill; the CPU default is the
  // recurrence, bit-identical to llama.cpp's); decode steps take the recurrence either way.
  RunOptions chunked;
  chunked.backend.cpu.gdn_prefill = cpu::GdnPrefill::chunked;
  const auto m = LoadedModel::load(model().file().path(), {}, chunked);
  for (size_t n : {1, 63, 64, 65, 300}) {
    const std::vector<int32_t> prefix(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(n));
    const auto pre = all_logits(prefix, f32_cache(), m.get());  // one batch: the chunked delta rule
    EXPECT_LT(test::nmse(pre.data(), dec.data(), n * V), 1e-5) << n << " tokens";
  }
}

TEST_P(HybridSession, BatchSplittingDoesNotChangeLogits) {
  const auto toks = random_tokens(150, 3);
  const auto one = all_logits(toks, f32_cache(512, 512));
  for (int32_t nb : {7, 64, 100}) {
    const auto split = all_logits(toks, f32_cache(512, nb));
    EXPECT_LT(test::nmse(split.data(), one.data(), one.size()), 1e-10) << "n_batch " << nb;
  }
}

TEST_P(HybridSession, TwoTurnsEqualOnePrefillOfTheConcatenation) {
  const auto a = random_tokens(40, 4), b = random_tokens(30, 5);
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  const size_t V = static_cast<size_t>(model().config().n_vocab);
  const auto full = all_logits(ab, SessionOptions{256});
  Session s(model(), SessionOptions{256});
  std::vector<float> first(a.size() * V), second(b.size() * V);
  s.eval_all(a, first.data());
  s.eval_all(b, second.data());  // only b is evaluated: the recurrent state and KV cache hold a
  EXPECT_EQ(s.n_past(), static_cast<int64_t>(ab.size()));
  EXPECT_LT(test::nmse(second.data(), full.data() + a.size() * V, second.size()), 1e-9);
  // The continuation depends on the carried state: without it the logits differ.
  Session fresh(model(), SessionOptions{256});
  const auto l = fresh.eval(b);
  EXPECT_GT(test::nmse(l.data(), full.data() + (ab.size() - 1) * V, V), 1e-4);
}

TEST_P(HybridSession, ResetClearsTheRecurrentState) {
  const auto a = random_tokens(20, 6), b = random_tokens(9, 7);
  auto copy = [](std::span<const float> l) { return std::vector<float>(l.begin(), l.end()); };
  Session s(model(), f32_cache());
  const auto first = copy(s.eval(a));
  s.eval(b);
  s.reset();
  EXPECT_EQ(s.n_past(), 0);
  EXPECT_EQ(copy(s.eval(a)), first);  // from zero state again: bit-identical
}

TEST_P(HybridSession, PrefixTruncationReevaluates) {
  const auto a = random_tokens(12, 8), b = random_tokens(5, 9);
  auto copy = [](std::span<const float> l) { return std::vector<float>(l.begin(), l.end()); };
  Session s(model(), f32_cache());
  s.eval(a);
  const auto lb = copy(s.eval(b));
  EXPECT_TRUE(s.keep_prefix(s.n_past()));  // nothing to drop
  // Dropping b cannot be done on a recurrent state: the session is rebuilt from a.
  EXPECT_FALSE(s.keep_prefix(static_cast<int64_t>(a.size())));
  EXPECT_EQ(s.n_past(), static_cast<int64_t>(a.size()));
  const auto lb2 = copy(s.eval(b));
  EXPECT_LT(test::nmse(lb2.data(), lb.data(), lb.size()), 1e-9);
  EXPECT_TRUE(s.keep_prefix(0));  // back to empty: a reset
  EXPECT_EQ(s.n_past(), 0);
}

TEST_P(HybridSession, ContextFullLeavesTheStateUnchanged) {
  Session s(model(), f32_cache(16));
  const auto a = random_tokens(10, 10), b = random_tokens(6, 11);
  s.eval(a);
  EXPECT_THROW(s.eval(random_tokens(7, 12)), Error);
  EXPECT_EQ(s.n_past(), 10);
  // The failed call did not touch the recurrent state: continuing equals one pass over a + b.
  s.eval(b);
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  Session ref(model(), f32_cache(16));
  const auto l = ref.eval(ab);
  EXPECT_LT(test::nmse(s.last_logits().data(), l.data(), l.size()), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Archs, HybridSession,
                         ::testing::Values(synth::Arch::qwen35moe, synth::Arch::qwen3next),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

// ---- metadata variants ------------------------------------------------------------------------

class HybridMetadata : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { test::remove_scratch(); }
  static std::vector<float> logits(const std::string& path, const std::vector<int32_t>& toks) {
    auto m = LoadedModel::load(path);
    Session s(*m, f32_cache());
    std::vector<float> out(toks.size() * static_cast<size_t>(m->config().n_vocab));
    s.eval_all(toks, out.data());
    return out;
  }
};

TEST_F(HybridMetadata, TrailingMtpBlockIsNotRun) {
  // block_count 5 with nextn_predict_layers 1: the forward runs the 4 trunk blocks and never
  // needs the MTP block's tensors.
  synth::ModelPlan p = hybrid_plan(synth::Arch::qwen35moe);
  const std::string base = test::write_plan(p, "q35-base");
  set_meta(p, "qwen35moe.block_count", gguf::Value::u32(5));
  set_meta(p, "qwen35moe.nextn_predict_layers", gguf::Value::u32(1));
  const std::string mtp = test::write_plan(p, "q35-mtp");
  auto m = LoadedModel::load(mtp);
  EXPECT_EQ(m->config().n_layer, 4);
  const std::vector<int32_t> toks{1, 5, 9, 200, 3};
  EXPECT_EQ(logits(mtp, toks), logits(base, toks));
}

TEST_F(HybridMetadata, RecurrentLayersArrayWinsOverTheInterval) {
  // An interval of 2 alone would make block 1 attention (whose tensors the file lacks); the
  // explicit per-block array keeps the file's real layout.
  synth::ModelPlan p = hybrid_plan(synth::Arch::qwen35moe);
  set_meta(p, "qwen35moe.full_attention_interval", gguf::Value::u32(2));
  set_meta(p, "qwen35moe.attention.recurrent_layers", gguf::Value::arr_bool({true, true, true, false}));
  auto m = LoadedModel::load(test::write_plan(p, "q35-recurrent-array"));
  EXPECT_EQ(m->config().layer_kind[1], LayerKind::deltanet);
  EXPECT_EQ(m->config().layer_kind[3], LayerKind::attention);
  // Without the array the interval applies, and block 1's missing attention tensors are named.
  synth::ModelPlan q = hybrid_plan(synth::Arch::qwen35moe);
  set_meta(q, "qwen35moe.full_attention_interval", gguf::Value::u32(2));
  try {
    LoadedModel::load(test::write_plan(q, "q35-interval-2"));
    FAIL() << "expected a missing-tensor error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_q"), std::string::npos) << e.what();
  }
}

TEST_F(HybridMetadata, RejectsInconsistentDeltaNetHyperparameters) {
  synth::ModelPlan p = hybrid_plan(synth::Arch::qwen35moe);
  set_meta(p, "qwen35moe.ssm.inner_size", gguf::Value::u32(p.hp.ssm_inner_size * 2));
  try {
    LoadedModel::load(test::write_plan(p, "q35-bad-inner"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ssm.inner_size"), std::string::npos) << e.what();
  }
  synth::ModelPlan q = hybrid_plan(synth::Arch::qwen35moe);
  set_meta(q, "qwen35moe.ssm.time_step_rank", gguf::Value::u32(q.hp.ssm_group_count * 2 + 1));
  EXPECT_THROW(LoadedModel::load(test::write_plan(q, "q35-bad-rank")), Error);
}

}  // namespace
}  // namespace ferry
