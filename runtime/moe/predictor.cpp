#include "runtime/moe/predictor.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "kernels/cpu/matmul.hpp"
#include "runtime/moe/routing.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

namespace {

// Indices of the n largest values of v (descending; lower index first on ties).
void top_n(const float* v, int32_t size, int32_t n, std::vector<int32_t>& order, int32_t* out) {
  order.resize(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  n = std::min(n, size);
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy_n(order.begin(), n, out);
}

}  // namespace

RouterPredictor::RouterPredictor(std::vector<WeightView> routers, int32_t n_layer, int32_t n_expert, int32_t top_k,
                                 PredictorOptions o)
    : routers_(std::move(routers)), n_layer_(n_layer), n_expert_(n_expert), top_k_(top_k),
      n_(o.n_candidates > 0 ? std::min(o.n_candidates, n_expert) : top_k), o_(o) {
  if (n_layer < 1 || n_expert < 1 || top_k < 1 || top_k > n_expert || o.depth < 1)
    fail(ErrorKind::invalid_arg, "predictor: bad shape (n_layer {}, n_expert {}, top_k {}, depth {})", n_layer,
         n_expert, top_k, o.depth);
  if (!routers_.empty() && static_cast<int32_t>(routers_.size()) != n_layer)
    fail(ErrorKind::internal, "predictor: {} routers for {} layers", routers_.size(), n_layer);
  for (const WeightView& r : routers_)
    if (r.data && r.rows != n_expert)
      fail(ErrorKind::invalid_arg, "predictor: a router has {} rows for {} experts", r.rows, n_expert);
  const size_t L = static_cast<size_t>(n_layer);
  pending_router_.assign(L, std::vector<Pending>(static_cast<size_t>(o.depth)));
  pending_emitted_.assign(L, {});
  prev_.assign(L, {});
  freq_.assign(L, std::vector<float>(static_cast<size_t>(n_expert), 0.0f));
  reset_quality();
}

void RouterPredictor::reset_quality() {
  std::lock_guard lock(mu_);
  const size_t L = static_cast<size_t>(n_layer_);
  q_ = {};
  q_.depth = o_.depth;
  q_.router.assign(static_cast<size_t>(o_.depth), std::vector<PredictionCount>(L));
  q_.prev.assign(L, {});
  q_.freq.assign(L, {});
  q_.emitted.assign(L, {});
}

PredictionQuality RouterPredictor::quality() const {
  std::lock_guard lock(mu_);
  return q_;
}

void RouterPredictor::score(Pending& p, int32_t layer, const int32_t* ids, int32_t n_tokens, PredictionCount& c) {
  if (p.n_tokens == n_tokens && n_tokens > 0) {
    const size_t k = static_cast<size_t>(top_k_), w = static_cast<size_t>(p.width);
    for (size_t t = 0; t < static_cast<size_t>(n_tokens); ++t) {
      const int32_t* a = ids + t * k;
      PredictionCount one;
      one.tokens = 1;
      one.actual = k;
      for (size_t j = 0; j < w; ++j) {
        const int32_t e = p.ids[t * w + j];
        if (e < 0) continue;
        ++one.predicted;
        one.hit += std::find(a, a + k, e) != a + k;
      }
      c.add(one);
    }
  }
  p.n_tokens = 0;
  p.ids.clear();
}

std::vector<PredictedExpert> RouterPredictor::cross_layer(int32_t target, const float* x, int32_t n_embd) const {
  std::vector<PredictedExpert> r;
  if (routers_.empty() || target < 0 || target >= n_layer_) return r;
  const WeightView& W = routers_[static_cast<size_t>(target)];
  if (!W.data || W.cols != n_embd) return r;
  std::vector<float> p(static_cast<size_t>(n_expert_));
  cpu::matvec(W.type, W.data, W.rows, W.cols, x, p.data(), false);
  routing_softmax(p.data(), n_expert_, p.data());
  std::vector<int32_t> order, best(static_cast<size_t>(n_));
  top_n(p.data(), n_expert_, n_, order, best.data());
  for (int32_t e : best) r.push_back({target, e, p[static_cast<size_t>(e)]});
  return r;
}

void RouterPredictor::predict(int32_t layer, const float* x, int32_t n_tokens, const int32_t* ids, int32_t top_k,
                              std::vector<PredictedExpert>& out) {
  std::lock_guard lock(mu_);
  if (layer < 0 || layer >= n_layer_ || top_k != top_k_ || n_tokens < 0)
    fail(ErrorKind::internal, "predictor: step for layer {} top-{} (model: {} layers, top-{})", layer, top_k,
         n_layer_, top_k_);
  const size_t l = static_cast<size_t>(layer), k = static_cast<size_t>(top_k_);
  const size_t E = static_cast<size_t>(n_expert_), n = static_cast<size_t>(n_);
  for (int32_t d = 1; d <= o_.depth; ++d)
    score(pending_router_[l][static_cast<size_t>(d - 1)], layer, ids, n_tokens, q_.router[static_cast<size_t>(d - 1)][l]);
  score(pending_emitted_[l], layer, ids, n_tokens, q_.emitted[l]);

  // Same-layer history, token by token: predict from what came before, then learn this token.
  std::vector<int32_t> order, cand(n);
  for (size_t t = 0; t < static_cast<size_t>(n_tokens); ++t) {
    const int32_t* a = ids + t * k;
    auto count = [&](const int32_t* pred, size_t m, PredictionCount& c) {
      PredictionCount one{1, m, k, 0};
      for (size_t j = 0; j < m; ++j) one.hit += std::find(a, a + k, pred[j]) != a + k;
      c.add(one);
    };
    if (!prev_[l].empty()) {
      count(prev_[l].data(), k, q_.prev[l]);
      top_n(freq_[l].data(), n_expert_, n_, order, cand.data());
      count(cand.data(), n, q_.freq[l]);
    }
    prev_[l].assign(a, a + k);
    for (float& f : freq_[l]) f *= o_.freq_decay;
    for (size_t j = 0; j < k; ++j) freq_[l][static_cast<size_t>(a[j])] += 1.0f;
  }

  // Predictions for the next layers from this layer's x.
  for (int32_t d = 1; d <= o_.depth && n_tokens > 0; ++d) {
    const int32_t target = layer + d;
    if (target >= n_layer_) break;
    const size_t tl = static_cast<size_t>(target);
    const WeightView* W = routers_.empty() ? nullptr : &routers_[tl];
    const bool use_router = W && W->data && x;
    std::vector<float> best(E, -1.0f);  // emitted score per expert (max over tokens), -1: none
    Pending& pr = pending_router_[tl][static_cast<size_t>(d - 1)];
    Pending em;
    em.n_tokens = n_tokens;
    em.width = static_cast<int32_t>(n + k);
    em.ids.assign(static_cast<size_t>(n_tokens) * (n + k), -1);
    if (use_router) {
      const int64_t n_embd = W->cols;
      logits_.resize(static_cast<size_t>(n_tokens) * E);
      // (n_tokens, n_expert) = x (n_tokens, n_embd) · routerᵀ
      cpu::matmul(W->type, W->data, W->rows, W->cols, x, n_embd, n_tokens, logits_.data(),
                  static_cast<int64_t>(E));
      pr.n_tokens = n_tokens;
      pr.width = static_cast<int32_t>(n);
      pr.ids.resize(static_cast<size_t>(n_tokens) * n);
    }
    for (size_t t = 0; t < static_cast<size_t>(n_tokens); ++t) {
      int32_t* em_row = em.ids.data() + t * (n + k);
      size_t m = 0;
      std::vector<float> score(E, -1.0f);
      if (use_router) {
        float* p = logits_.data() + t * E;
        routing_softmax(p, n_expert_, p);
        int32_t* row = pr.ids.data() + t * n;
        top_n(p, n_expert_, static_cast<int32_t>(n), order, row);
        for (size_t j = 0; j < n; ++j) score[static_cast<size_t>(row[j])] = p[row[j]];
      }
      for (int32_t e : prev_[tl]) score[static_cast<size_t>(e)] = std::max(score[static_cast<size_t>(e)], 0.0f) + o_.prev_bonus;
      for (size_t e = 0; e < E; ++e) {
        if (score[e] < 0.0f) continue;
        em_row[m++] = static_cast<int32_t>(e);
        best[e] = std::max(best[e], score[e]);
      }
    }
    if (d == 1) pending_emitted_[tl] = std::move(em);
    for (size_t e = 0; e < E; ++e)
      if (best[e] >= 0.0f) out.push_back({target, static_cast<int32_t>(e), best[e]});
  }
}


std::string prediction_table(const PredictionQuality& q) {
  const auto cell = [](const PredictionCount& c) {
    if (c.tokens == 0) return fmt::format("{:>13}", "-");
    return fmt::format("{:>6.1f}/{:<6.1f}", 100.0 * c.precision(), 100.0 * c.recall());
  };
  std::string s = "routing prediction, precision/recall % (set sizes: router/freq = n, prev = top_k, emitted = union)\n";
  s += fmt::format("{:>5}", "layer");
  for (int32_t d = 1; d <= q.depth; ++d) s += fmt::format(" {:>13}", fmt::format("router d={}", d));
  s += fmt::format(" {:>13} {:>13} {:>13} {:>8}\n", "prev token", "frequency", "emitted", "|emit|");
  std::vector<PredictionCount> tot_router(static_cast<size_t>(q.depth));
  PredictionCount tot_prev, tot_freq, tot_emit;
  for (size_t l = 0; l < q.prev.size(); ++l) {
    s += fmt::format("{:>5}", l);
    for (size_t d = 0; d < static_cast<size_t>(q.depth); ++d) {
      s += fmt::format(" {}", cell(q.router[d][l]));
      tot_router[d].add(q.router[d][l]);
    }
    const auto& e = q.emitted[l];
    s += fmt::format(" {} {} {} {:>8.1f}\n", cell(q.prev[l]), cell(q.freq[l]), cell(e),
                     e.tokens ? double(e.predicted) / double(e.tokens) : 0.0);
    tot_prev.add(q.prev[l]);
    tot_freq.add(q.freq[l]);
    tot_emit.add(e);
  }
  s += fmt::format("{:>5}", "all");
  for (const auto& c : tot_router) s += fmt::format(" {}", cell(c));
  s += fmt::format(" {} {} {} {:>8.1f}\n", cell(tot_prev), cell(tot_freq), cell(tot_emit),
                   tot_emit.tokens ? double(tot_emit.predicted) / double(tot_emit.tokens) : 0.0);
  return s;
}

}  // namespace ferry
