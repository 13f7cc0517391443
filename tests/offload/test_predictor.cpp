// Routing predictor: precision/recall bookkeeping on a hand-made case where every prediction is
// known, the emitted (prefetch) list, and batch/decode mismatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "runtime/moe/predictor.hpp"

using namespace ferry;

namespace {

// Identity routers: layer l's logits are x itself, so the predicted experts are x's top entries.
struct Identity {
  std::vector<float> eye = std::vector<float>(16, 0.0f);
  std::vector<WeightView> routers;
  explicit Identity(int32_t n_layer) {
    for (int i = 0; i < 4; ++i) eye[static_cast<size_t>(i * 4 + i)] = 1.0f;
    for (int32_t l = 0; l < n_layer; ++l) routers.push_back({eye.data(), GgmlType::F32, 4, 4});
  }
};

std::vector<PredictedExpert> step(RouterPredictor& p, int32_t layer, std::vector<float> x, std::vector<int32_t> ids) {
  std::vector<PredictedExpert> out;
  p.predict(layer, x.data(), 1, ids.data(), 2, out);
  return out;
}

void expect_count(const PredictionCount& c, uint64_t tokens, uint64_t predicted, uint64_t actual, uint64_t hit) {
  EXPECT_EQ(c.tokens, tokens);
  EXPECT_EQ(c.predicted, predicted);
  EXPECT_EQ(c.actual, actual);
  EXPECT_EQ(c.hit, hit);
}

}  // namespace

TEST(Predictor, HandMadePrecisionRecall) {
  Identity id(3);
  PredictorOptions o;
  o.depth = 2;
  o.n_candidates = 3;
  RouterPredictor p(id.routers, 3, 4, 2, o);
  // token 0
  step(p, 0, {4, 3, 0, -1}, {0, 1});  // predicts L1 {0,1,2}, L2 {0,1,2}
  step(p, 1, {0, 1, 5, 2}, {2, 3});   // L1 d=1: 1 hit of 3; predicts L2 {2,3,1}
  step(p, 2, {1, 1, 1, 1}, {1, 2});   // L2 d=1 {2,3,1}: 2 hits; d=2 {0,1,2}: 2 hits
  // token 1
  const auto out = step(p, 0, {-1, 0, 1, 2}, {1, 3});  // prev L0 {0,1}: 1 hit; freq L0 {0,1,2}: 1 hit
  step(p, 1, {0, 0, 0, 0}, {2, 3});                    // L1 d=1 {3,2,1}: 2 hits; prev {2,3}: 2 hits

  const auto q = p.quality();
  expect_count(q.router[0][1], 2, 6, 4, 3);
  expect_count(q.router[0][2], 1, 3, 2, 2);
  expect_count(q.router[1][2], 1, 3, 2, 2);
  expect_count(q.router[1][1], 0, 0, 0, 0);  // nothing predicts layer 1 from two layers before
  expect_count(q.prev[0], 1, 2, 2, 1);
  expect_count(q.prev[1], 1, 2, 2, 2);
  expect_count(q.freq[0], 1, 3, 2, 1);
  // emitted for L1: token 0 {0,1,2} (no history yet): 1 hit; token 1 {3,2,1} ∪ prev {2,3}: 2 hits
  expect_count(q.emitted[1], 2, 6, 4, 3);
  EXPECT_DOUBLE_EQ(q.router[0][1].precision(), 0.5);
  EXPECT_DOUBLE_EQ(q.router[0][1].recall(), 0.75);

  // Token 1's emitted list at layer 0: for layer 1 experts {1,2,3}, prev-token ones (2,3) boosted
  // by 0.5 above their router probability; for layer 2 router {3,2,1} ∪ prev {1,2}.
  std::map<std::pair<int32_t, int32_t>, float> s;
  for (const auto& e : out) s[{e.layer, e.expert}] = e.score;
  ASSERT_EQ(s.size(), 6u);
  EXPECT_FALSE(s.count({1, 0}));
  EXPECT_LT(s.at({1, 1}), 0.5f);
  EXPECT_GT(s.at({1, 2}), 0.5f);
  EXPECT_GT(s.at({1, 3}), s.at({1, 2}));
  EXPECT_GT(s.at({2, 1}), 0.5f);
  EXPECT_GT(s.at({2, 2}), 0.5f);
  EXPECT_LT(s.at({2, 3}), 0.5f + s.at({2, 1}));

  // cross_layer ranks by probability (softmax of the identity logits).
  const std::vector<float> x = {0.5f, 3.0f, -2.0f, 1.0f};
  const auto r = p.cross_layer(1, x.data(), 4);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].expert, 1);
  EXPECT_EQ(r[1].expert, 3);
  EXPECT_EQ(r[2].expert, 0);
  EXPECT_GT(r[0].score, r[1].score);

  p.reset_quality();
  expect_count(p.quality().router[0][1], 0, 0, 0, 0);
  EXPECT_NE(prediction_table(q).find("router d=2"), std::string::npos);
}

// Predictions made for a batch are only scored against a step with the same number of tokens;
// inside a batch, the "previous token" of row t is row t-1.
TEST(Predictor, BatchRowsAndMismatches) {
  Identity id(2);
  PredictorOptions o;
  o.depth = 1;
  RouterPredictor p(id.routers, 2, 4, 2, o);
  std::vector<PredictedExpert> out;
  const std::vector<float> x2 = {4, 3, 0, 0, 0, 0, 3, 4};  // rows predict {0,1} and {3,2}
  const std::vector<int32_t> ids2 = {0, 1, 1, 2};
  p.predict(0, x2.data(), 2, ids2.data(), 2, out);
  const std::vector<int32_t> ids_l1 = {0, 1, 2, 3};
  p.predict(1, x2.data(), 2, ids_l1.data(), 2, out);
  auto q = p.quality();
  expect_count(q.router[0][1], 2, 4, 4, 4);
  expect_count(q.prev[0], 1, 2, 2, 1);  // row 1 vs row 0 of the same batch
  // A 2-token prediction is dropped when layer 1 then runs one token.
  p.predict(0, x2.data(), 2, ids2.data(), 2, out);
  const std::vector<int32_t> one = {0, 1};
  p.predict(1, x2.data(), 1, one.data(), 2, out);
  q = p.quality();
  expect_count(q.router[0][1], 2, 4, 4, 4);
}

// Without routers only the temporal predictors run and the emitted set is the previous token's.
TEST(Predictor, WithoutRouters) {
  RouterPredictor p({}, 2, 8, 2, {});
  std::vector<PredictedExpert> out;
  const std::vector<int32_t> a = {5, 6}, b = {6, 7};
  p.predict(0, nullptr, 1, a.data(), 2, out);
  p.predict(1, nullptr, 1, b.data(), 2, out);
  out.clear();
  p.predict(0, nullptr, 1, a.data(), 2, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].layer, 1);
  EXPECT_EQ(out[0].expert, 6);
  EXPECT_EQ(out[1].expert, 7);
  p.predict(1, nullptr, 1, b.data(), 2, out);
  const auto q = p.quality();
  expect_count(q.prev[1], 1, 2, 2, 2);
  expect_count(q.emitted[1], 2, 2, 4, 2);  // the first token had nothing to emit: recall 0 there
}
