// Sampler: llama.cpp's chain (penalty → top-k → top-p → min-p → temperature → draw) on
// hand-computed examples, determinism, and empirical frequencies against the expected distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "runtime/core/error.hpp"
#include "runtime/sampling/sampler.hpp"

namespace ferry {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

SamplingParams plain(float temp = 1.0f) {
  SamplingParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = 1234;
  return p;
}

// Five tokens with probabilities 0.5, 0.2, 0.15, 0.1, 0.05 placed at scrambled ids.
const std::vector<int32_t> kIds = {3, 0, 4, 1, 2};
const std::vector<float> kProbs = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f};
std::vector<float> five_logits() {
  std::vector<float> l(5);
  for (size_t i = 0; i < 5; ++i)
    l[kIds[i]] = std::log(kProbs[i]) + 0.7f;  // shift: softmax-invariant
  return l;
}
std::vector<int32_t> ids_of(const std::vector<TokenProb>& c) {
  std::vector<int32_t> out;
  for (const auto& t : c) out.push_back(t.id);
  return out;
}

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  auto p = plain(0.0f);
  p.top_k = 40;  // filters do not matter when greedy
  Sampler s(p);
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const auto l = random_logits(250000, seed);
    const auto best = std::max_element(l.begin(), l.end()) - l.begin();
    EXPECT_EQ(s.sample(l), best);
  }
  std::vector<float> tie = {0.1f, 2.0f, -1.0f, 2.0f, 2.0f};
  EXPECT_EQ(s.sample(tie), 1);
  const auto c = s.candidates(tie);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].id, 1);
  EXPECT_FLOAT_EQ(c[0].p, 1.0f);
}

TEST(Sampler, TopK1EqualsGreedy) {
  auto p = SamplingParams{};
  p.top_k = 1;
  p.seed = 7;
  Sampler s(p);
  Sampler g(plain(0.0f));
  for (uint32_t seed = 10; seed < 40; ++seed) {
    const auto l = random_logits(5000, seed);
    EXPECT_EQ(s.sample(l), g.sample(l));
  }
}

TEST(Sampler, DeterministicForASeedAndDifferentAcrossSeeds) {
  SamplingParams p;  // llama.cpp defaults: top-k 40, top-p 0.95, min-p 0.05, temp 0.8
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  size_t differ = 0;
  for (uint32_t i = 0; i < 300; ++i) {
    const auto l = random_logits(2000, 100 + i, 1.0f);  // flat enough that draws vary
    const int32_t ta = a.sample(l), tb = b.sample(l), tc = c.sample(l);
    EXPECT_EQ(ta, tb);
    differ += ta != tc;
  }
  EXPECT_GT(differ, 30u);
  // reset() replays the same sequence.
  a.reset();
  Sampler fresh(a.params());
  for (uint32_t i = 0; i < 50; ++i) {
    const auto l = random_logits(2000, 900 + i, 1.0f);
    EXPECT_EQ(a.sample(l), fresh.sample(l));
  }
}

TEST(Sampler, RandomSeedIsReportedAndReproducible) {
  SamplingParams p;
  p.seed = 0xFFFFFFFF;
  Sampler a(p), b(p);
  EXPECT_NE(a.seed(), 0xFFFFFFFFu);
  // Two random seeds coinciding has probability 2^-32.
  EXPECT_NE(a.seed(), b.seed());
  SamplingParams q = p;
  q.seed = a.seed();
  Sampler replay(q);
  for (uint32_t i = 0; i < 50; ++i) {
    const auto l = random_logits(1000, 300 + i, 1.0f);
    EXPECT_EQ(a.sample(l), replay.sample(l));
  }
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  // Cumulative: 0.5, 0.7, 0.85, 0.95, 1.0 (boundaries avoided: float sums).
  const auto l = five_logits();
  struct Case {
    float top_p;
    size_t keep;
  };
  for (const Case c : {Case{0.01f, 1}, Case{0.45f, 1}, Case{0.55f, 2}, Case{0.69f, 2},
                       Case{0.8f, 3}, Case{0.86f, 4}, Case{0.97f, 5}}) {
    auto p = plain();
    p.top_p = c.top_p;
    Sampler s(p);
    const auto cand = s.candidates(l);
    EXPECT_EQ(ids_of(cand), std::vector<int32_t>(kIds.begin(), kIds.begin() + c.keep))
        << "top_p " << c.top_p;
    // Kept probabilities are renormalised.
    float kept = 0.0f;
    for (size_t i = 0; i < c.keep; ++i) kept += kProbs[i];
    for (size_t i = 0; i < cand.size(); ++i) EXPECT_NEAR(cand[i].p, kProbs[i] / kept, 1e-5f);
  }
}

TEST(Sampler, TopPOnLargeUnsortedVocabularyMatchesFullSort) {
  // Flat logits: the nucleus is far larger than the first partial sort (256).
  const auto l = random_logits(50000, 5, 0.5f);
  auto p = plain();
  p.top_p = 0.9f;
  Sampler s(p);
  const auto cand = s.candidates(l);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const float mx = l[order[0]];
  double total = 0;
  for (float x : l) total += std::exp(x - mx);
  double cum = 0;
  size_t keep = 0;
  while (keep < order.size()) {
    cum += std::exp(l[order[keep]] - mx) / total;
    ++keep;
    if (cum >= 0.9) break;
  }
  EXPECT_GT(keep, 1000u);
  ASSERT_NEAR(static_cast<double>(cand.size()), static_cast<double>(keep),
              2.0);  // float vs double sums
  for (size_t i = 0; i < std::min(cand.size(), keep); ++i) ASSERT_EQ(cand[i].id, order[i]) << i;
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfMax) {
  const auto l = five_logits();
  struct Case {
    float min_p;
    size_t keep;
  };
  // Thresholds min_p · 0.5: 0.21 → 0.105 (3 kept), 0.41 → 0.205 (1), 0.19 → 0.095 (4), 0.09 → 0.045
  // (5).
  for (const Case c :
       {Case{0.21f, 3}, Case{0.41f, 1}, Case{0.19f, 4}, Case{0.09f, 5}, Case{0.99f, 1}}) {
    auto p = plain();
    p.min_p = c.min_p;
    Sampler s(p);
    auto got = ids_of(s.candidates(l));
    std::sort(got.begin(), got.end());
    std::vector<int32_t> want(kIds.begin(), kIds.begin() + c.keep);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << "min_p " << c.min_p;
  }
}

TEST(Sampler, ChainOrderTopKThenTopPThenMinP) {
  // top-k 3 renormalises to 0.5/0.85, 0.2/0.85, 0.15/0.85 = 0.588, 0.235, 0.176 before top-p,
  // so top-p 0.8 keeps two (0.588 + 0.235 = 0.824 ≥ 0.8; on the full distribution it would keep
  // three). min-p 0.45 then drops the second (0.2 / 0.5 = 0.4 < 0.45).
  const auto l = five_logits();
  auto p = plain();
  p.top_k = 3;
  p.top_p = 0.8f;
  Sampler s(p);
  EXPECT_EQ(ids_of(s.candidates(l)), (std::vector<int32_t>{kIds[0], kIds[1]}));
  p.min_p = 0.45f;
  Sampler s2(p);
  EXPECT_EQ(ids_of(s2.candidates(l)), (std::vector<int32_t>{kIds[0]}));
}

TEST(Sampler, TemperatureScalesLogits) {
  const auto l = five_logits();
  auto p = plain(2.0f);
  Sampler s(p);
  const auto cand = s.candidates(l);
  ASSERT_EQ(cand.size(), 5u);
  double z = 0;
  for (float q : kProbs) z += std::sqrt(q);
  for (const auto& c : cand) {
    const size_t rank = std::find(kIds.begin(), kIds.end(), c.id) - kIds.begin();
    EXPECT_NEAR(c.p, std::sqrt(kProbs[rank]) / z, 1e-5);
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  std::vector<float> l = {2.0f, -1.0f, 1.0f, 0.5f};
  auto p = plain();
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  s.accept(0);
  s.accept(1);
  s.accept(1);  // a repeat counts once
  // Window holds {1, 1}: only token 1 is penalised: -1 → -2.
  auto probs = [&](std::vector<float> x) {
    double z = 0;
    for (float v : x) z += std::exp(v);
    std::vector<double> out;
    for (float v : x) out.push_back(std::exp(v) / z);
    return out;
  };
  auto check = [&](const std::vector<float>& eff) {
    const auto want = probs(eff);
    auto cand = s.candidates(l);
    ASSERT_EQ(cand.size(), 4u);
    for (const auto& c : cand) EXPECT_NEAR(c.p, want[c.id], 1e-6) << "token " << c.id;
  };
  check({2.0f, -2.0f, 1.0f, 0.5f});
  s.accept(0);  // window {1, 0}
  check({1.0f, -2.0f, 1.0f, 0.5f});
  s.reset();
  check({2.0f, -1.0f, 1.0f, 0.5f});
  // The penalty changes what greedy picks: token 0 at 2.0/2 = 1.0 ties token 2; lowest id wins,
  // so penalise harder.
  auto g = plain(0.0f);
  g.repeat_penalty = 2.5f;
  Sampler gs(g);
  EXPECT_EQ(gs.sample(l), 0);
  gs.accept(0);
  EXPECT_EQ(gs.sample(l), 2);
}

// llama.cpp's penalties sampler: per distinct token in the window with `count` occurrences,
// logit = (repeat-penalised logit) - count * frequency - presence. Hand-computed.
TEST(Sampler, FrequencyAndPresencePenaltiesAsLlamaCpp) {
  const std::vector<float> l = {2.0f, -1.0f, 1.0f, 0.5f};
  auto p = plain();
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.repeat_last_n = 3;
  Sampler s(p);
  s.accept(3);
  s.accept(1);
  s.accept(1);
  s.accept(1);  // window {1, 1, 1}: token 3 has left it
  auto check = [&](const std::vector<float>& eff) {
    double z = 0;
    for (float v : eff) z += std::exp(v);
    const auto cand = s.candidates(l);
    ASSERT_EQ(cand.size(), 4u);
    for (const auto& c : cand) EXPECT_NEAR(c.p, std::exp(eff[c.id]) / z, 1e-6) << "token " << c.id;
  };
  check({2.0f, -1.0f - 3 * 0.5f - 0.25f, 1.0f, 0.5f});
  s.accept(0);  // window {1, 1, 0}
  check({2.0f - 0.5f - 0.25f, -1.0f - 2 * 0.5f - 0.25f, 1.0f, 0.5f});
  // With the repetition penalty too: divided (positive) or multiplied (negative) first.
  p.repeat_penalty = 2.0f;
  Sampler r(p);
  r.accept(0);
  r.accept(1);
  double z = 0;
  const std::vector<float> eff = {2.0f / 2 - 0.5f - 0.25f, -1.0f * 2 - 0.5f - 0.25f, 1.0f, 0.5f};
  for (float v : eff) z += std::exp(v);
  for (const auto& c : r.candidates(l)) EXPECT_NEAR(c.p, std::exp(eff[c.id]) / z, 1e-6) << "token " << c.id;
  // A presence penalty alone changes what greedy picks.
  auto g = plain(0.0f);
  g.presence_penalty = 1.5f;
  Sampler gs(g);
  EXPECT_EQ(gs.sample(l), 0);
  gs.accept(0);
  EXPECT_EQ(gs.sample(l), 2);  // 2.0 - 1.5 = 0.5 < 1.0
  // Negative penalties (OpenAI allows [-2, 2]) raise the seen token.
  auto n = plain(0.0f);
  n.frequency_penalty = -2.0f;
  Sampler ns(n);
  ns.accept(3);
  EXPECT_EQ(ns.sample(l), 3);  // 0.5 + 2 = 2.5 > 2.0
}

// The draw is llama.cpp's dist sampler: one uniform double per call, walk of the softmax.
TEST(Sampler, DrawMatchesLlamaCppDistAlgorithm) {
  const auto l = random_logits(64, 77, 1.5f);
  auto p = plain(0.7f);
  p.seed = 99;
  Sampler s(p);
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 2000; ++i) {
    const double r = u(rng);
    float mx = -INFINITY;
    for (float x : l) mx = std::max(mx, x / 0.7f);
    double total = 0;
    for (float x : l) total += std::exp(x / 0.7f - mx);
    double run = 0;
    int32_t want = 63;
    for (int32_t k = 0; k < 64; ++k) {
      run += std::exp(l[k] / 0.7f - mx);
      if (run >= total * r) {
        want = k;
        break;
      }
    }
    ASSERT_EQ(s.sample(l), want) << "draw " << i;
  }
}

TEST(Sampler, EmpiricalFrequenciesMatchDistribution) {
  // 8 tokens, temp 0.7, no filters: chi-square over 100k draws with a fixed seed. With 7 degrees
  // of freedom the 99.99th percentile is 29.9; a wrong temperature or an off-by-one walk gives
  // thousands.
  const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f, 1.5f, 0.7f};
  auto p = plain(0.7f);
  p.seed = 2024;
  Sampler s(p);
  std::vector<double> want(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += want[i] = std::exp(l[i] / 0.7);
  const int n = 100000;
  std::vector<int> count(l.size());
  for (int i = 0; i < n; ++i) ++count[s.sample(l)];
  double chi2 = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double e = n * want[i] / z;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 29.9);
  // And the same with top-k 3: only the three best appear, renormalised.
  p.top_k = 3;
  Sampler k3(p);
  std::vector<int> c3(l.size());
  for (int i = 0; i < 30000; ++i) ++c3[k3.sample(l)];
  const std::vector<int> top = {3, 6, 0};
  double z3 = 0;
  for (int t : top) z3 += want[t];
  double chi3 = 0;
  for (int t : top) {
    const double e = 30000 * want[t] / z3;
    chi3 += (c3[t] - e) * (c3[t] - e) / e;
  }
  EXPECT_LT(chi3, 18.4);  // 2 dof, 99.99th percentile
  EXPECT_EQ(c3[1] + c3[2] + c3[4] + c3[5] + c3[7], 0);
}

TEST(Sampler, LargeVocabularyIsFast) {
  const auto l = random_logits(250000, 3);
  SamplingParams p;  // defaults: top-k 40 → partial selection
  p.seed = 1;
  Sampler s(p);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) s.sample(l);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20;
  std::printf("sample() on 250k logits (defaults): %.2f ms\n", ms);
  EXPECT_LT(ms, 100.0);  // a full sort per call would still pass; this catches quadratic work
}

TEST(Sampler, RejectsBadParameters) {
  auto p = plain();
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = plain(NAN);
  EXPECT_THROW(Sampler{p}, Error);
  p = plain();
  p.presence_penalty = NAN;
  EXPECT_THROW(Sampler{p}, Error);
  p = plain();
  p.frequency_penalty = NAN;
  EXPECT_THROW(Sampler{p}, Error);
  Sampler s(plain());
  EXPECT_THROW(s.sample(std::span<const float>{}), Error);
}

// The test-only forcing (FERRY_TEST_FORCE_TOKENS): the scripted ids in order whatever the logits,
// the last one repeated after the list, and the list from its start again after reset().
TEST(Sampler, ForcedTokensIgnoreTheLogitsAndRestartOnReset) {
  SamplingParams p = plain(0.0f);
  p.forced_tokens = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{4, 1, 2});
  Sampler s(p);
  const std::vector<float> l = five_logits();  // greedy alone would pick 3
  EXPECT_EQ(s.sample(l), 4);
  s.accept(4);  // accepting (prompt tokens too) does not advance the script
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(s.sample(l), 2);
  EXPECT_EQ(s.sample(l), 2);
  s.reset();
  EXPECT_EQ(s.sample(l), 4);
  p.forced_tokens = std::make_shared<const std::vector<int32_t>>();  // empty: not forced
  EXPECT_EQ(Sampler(p).sample(l), 3);
}

}  // namespace
}  // namespace ferry
