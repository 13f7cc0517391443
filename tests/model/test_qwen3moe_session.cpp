// The qwen3moe forward through the engine on a tiny synthetic model: prefill vs decode, batch
// splitting, KV-cache reuse across turns (two turns = one prefill of the concatenation), reset,
// prefix truncation, context-full errors, F16 vs F32 caches.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

class Qwen3MoeSession : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = LoadedModel::load(test::write_plan(test::tiny_plan(), "qwen3moe-tiny-f32")).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    test::remove_scratch();
  }

  static std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, model_->config().n_vocab - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = d(rng);
    return t;
  }
  static std::vector<float> all_logits(const std::vector<int32_t>& toks, SessionOptions o) {
    Session s(*model_, o);
    std::vector<float> out(toks.size() * static_cast<size_t>(model_->config().n_vocab));
    s.eval_all(toks, out.data());
    return out;
  }
  static inline LoadedModel* model_ = nullptr;
};

SessionOptions f32_cache(int64_t n_ctx = 256, int32_t n_batch = 512) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.type_k = o.type_v = GgmlType::F32;
  return o;
}

TEST_F(Qwen3MoeSession, LogitsAreFiniteAndNotFlat) {
  const auto toks = random_tokens(8, 1);
  const auto l = all_logits(toks, f32_cache());
  float lo = l[0], hi = l[0];
  for (float v : l) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 0.1f);
}

TEST_F(Qwen3MoeSession, PrefillMatchesDecode) {
  const auto toks = random_tokens(40, 2);
  const size_t V = static_cast<size_t>(model_->config().n_vocab);
  for (GgmlType ct : {GgmlType::F32, GgmlType::F16}) {
    SessionOptions o = f32_cache();
    o.type_k = o.type_v = ct;
    const auto prefill = all_logits(toks, o);
    Session s(*model_, o);
    std::vector<float> dec(toks.size() * V);
    for (size_t i = 0; i < toks.size(); ++i) {
      const auto l = s.eval(std::span<const int32_t>(toks).subspan(i, 1));
      std::copy(l.begin(), l.end(), dec.begin() + static_cast<std::ptrdiff_t>(i * V));
    }
    // Not bit-identical: like llama.cpp's CPU backend, a prompt batch adds some quantized
    // products in other orders than single tokens do (kernels/cpu/matmul.hpp).
    EXPECT_LT(test::nmse(dec.data(), prefill.data(), dec.size()), 1e-7) << type_name(ct);
  }
}

TEST_F(Qwen3MoeSession, BatchSplittingDoesNotChangeLogits) {
  const auto toks = random_tokens(29, 3);
  const auto one = all_logits(toks, f32_cache(256, 512));
  const auto split = all_logits(toks, f32_cache(256, 7));
  EXPECT_LT(test::nmse(split.data(), one.data(), one.size()), 1e-10);
}

TEST_F(Qwen3MoeSession, TwoTurnsEqualOnePrefillOfTheConcatenation) {
  const auto a = random_tokens(17, 4), b = random_tokens(11, 5);
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  const size_t V = static_cast<size_t>(model_->config().n_vocab);
  const auto full = all_logits(ab, SessionOptions{256});
  Session s(*model_, SessionOptions{256});
  std::vector<float> first(a.size() * V), second(b.size() * V);
  s.eval_all(a, first.data());
  s.eval_all(b, second.data());  // only b is evaluated: the cache holds a
  EXPECT_EQ(s.n_past(), static_cast<int64_t>(ab.size()));
  EXPECT_LT(test::nmse(second.data(), full.data() + a.size() * V, second.size()), 1e-9);
  // And the last logits of a turn equal the last row of the single pass.
  EXPECT_LT(test::nmse(s.last_logits().data(), full.data() + (ab.size() - 1) * V, V), 1e-9);
  // A continuation that was not seen must differ (the test can fail).
  Session fresh(*model_, SessionOptions{256});
  const auto l = fresh.eval(b);
  EXPECT_GT(test::nmse(l.data(), full.data() + (ab.size() - 1) * V, V), 1e-4);
}

TEST_F(Qwen3MoeSession, ResetAndPrefixTruncation) {
  const auto a = random_tokens(12, 6), b = random_tokens(5, 7);
  auto copy = [](std::span<const float> l) { return std::vector<float>(l.begin(), l.end()); };
  Session s(*model_, f32_cache());
  const auto first = copy(s.eval(a));
  s.eval(b);
  s.reset();
  EXPECT_EQ(s.n_past(), 0);
  EXPECT_TRUE(s.tokens().empty());
  const auto again = copy(s.eval(a));
  EXPECT_EQ(again, first);  // same computation from an empty cache: bit-identical
  // keep_prefix: a + b, drop b, evaluate b again -> the same logits as the first time.
  const auto lb = copy(s.eval(b));
  EXPECT_TRUE(s.keep_prefix(static_cast<int64_t>(a.size())));
  EXPECT_EQ(s.n_past(), static_cast<int64_t>(a.size()));
  const auto lb2 = copy(s.eval(b));
  EXPECT_EQ(lb2, lb);
}

TEST_F(Qwen3MoeSession, ContextFullIsAnErrorAndLeavesTheSessionUsable) {
  Session s(*model_, f32_cache(16));
  s.eval(random_tokens(10, 8));
  try {
    s.eval(random_tokens(7, 9));
    FAIL() << "expected a context error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::context);
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.n_past(), 10);
  s.eval(random_tokens(6, 10));  // exactly fills the context
  EXPECT_EQ(s.n_past(), 16);
  EXPECT_THROW(s.eval(random_tokens(1, 11)), Error);
}

TEST_F(Qwen3MoeSession, F16CacheCloseToF32) {
  const auto toks = random_tokens(32, 12);
  const auto f32 = all_logits(toks, f32_cache());
  const auto f16 = all_logits(toks, SessionOptions{256});
  const double e = test::nmse(f16.data(), f32.data(), f32.size());
  EXPECT_LT(e, 1e-4);
  EXPECT_GT(e, 0.0);  // the cache type really changed
}

TEST_F(Qwen3MoeSession, RejectsBadTokensAndOptions) {
  Session s(*model_, f32_cache());
  const std::vector<int32_t> bad{1, model_->config().n_vocab};
  EXPECT_THROW(s.eval(bad), Error);
  EXPECT_EQ(s.n_past(), 0);
  SessionOptions o;
  o.type_k = GgmlType::Q4_K;
  EXPECT_THROW(Session(*model_, o), Error);
}

}  // namespace
}  // namespace ferry
