// The locality routing process (see routing.hpp and docs/routing.md) and its random generator.
#include <algorithm>
#include <cmath>

#include "runtime/moe/routing.hpp"
#include "runtime/moe/stats_routing.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

RoutingRng::RoutingRng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t RoutingRng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double RoutingRng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint32_t RoutingRng::below(uint32_t n) {
  // Lemire's multiply-shift; the bias (< n / 2^32) is irrelevant for routing.
  return static_cast<uint32_t>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32);
}

LocalityRouting::LocalityRouting(int32_t n_expert, int32_t top_k, uint64_t seed, const LocalityParams& p)
    : n_expert_(n_expert), top_k_(top_k), par_(p), rng_(seed), p_prev_(p.initial_p_prev),
      p_window_(p.initial_p_window) {
  if (n_expert < 1 || top_k < 1 || top_k > n_expert)
    fail(ErrorKind::invalid_arg, "locality routing: top_k {} outside [1, n_expert = {}]", top_k, n_expert);
  if (p.window < 2) fail(ErrorKind::invalid_arg, "locality routing: window {} < 2", p.window);
  // Popularity by rank, then a per-layer random permutation so that layers differ in which
  // experts are hot (as real routers do).
  std::vector<int32_t> perm(static_cast<size_t>(n_expert));
  for (int32_t i = 0; i < n_expert; ++i) perm[i] = i;
  for (int32_t i = n_expert - 1; i > 0; --i) std::swap(perm[i], perm[rng_.below(static_cast<uint32_t>(i + 1))]);
  std::vector<double> pop(static_cast<size_t>(n_expert));
  for (int32_t r = 0; r < n_expert; ++r)
    pop[static_cast<size_t>(perm[r])] = std::exp(-p.skew_lambda * r / n_expert);
  cdf_.resize(pop.size());
  double acc = 0.0;
  for (size_t e = 0; e < pop.size(); ++e) cdf_[e] = (acc += pop[e]);
  last_use_.assign(static_cast<size_t>(n_expert), -1);
}

int32_t LocalityRouting::draw_fresh() {
  const double u = rng_.uniform() * cdf_.back();
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  return static_cast<int32_t>(std::min<ptrdiff_t>(it - cdf_.begin(), n_expert_ - 1));
}

void LocalityRouting::next(int32_t* ids) {
  // Token t's candidates: "prev" = used at t-1; "older" = last used in [t-window, t-2].
  const int64_t t = t_;
  std::vector<int32_t> prev, older;
  for (int32_t e = 0; e < n_expert_; ++e) {
    const int64_t u = last_use_[static_cast<size_t>(e)];
    if (u < 0) continue;
    if (u == t - 1) prev.push_back(e);
    else if (u >= t - par_.window) older.push_back(e);
  }
  const auto taken = [&](int32_t e, int32_t n) { return std::find(ids, ids + n, e) != ids + n; };
  const auto pick_from = [&](std::vector<int32_t>& pool, int32_t n) -> int32_t {
    // Uniform among the pool's members not yet chosen for this token (-1 when none is left).
    pool.erase(std::remove_if(pool.begin(), pool.end(), [&](int32_t e) { return taken(e, n); }), pool.end());
    if (pool.empty()) return -1;
    return pool[rng_.below(static_cast<uint32_t>(pool.size()))];
  };
  for (int32_t j = 0; j < top_k_; ++j) {
    const double u = rng_.uniform();
    int32_t e = -1;
    if (u < p_prev_) e = pick_from(prev, j);
    else if (u < p_prev_ + p_window_) e = pick_from(older, j);
    while (e < 0 || taken(e, j)) e = draw_fresh();
    ids[j] = e;
  }
  // Feedback on this token's own statistics (only once there is a full history to compare with).
  if (t >= par_.window) {
    int32_t n_prev = 0, n_window = 0;
    for (int32_t j = 0; j < top_k_; ++j) {
      const int64_t u = last_use_[static_cast<size_t>(ids[j])];
      n_prev += u == t - 1;
      n_window += u >= t - par_.window;
    }
    const double k = top_k_;
    p_prev_ = std::clamp(p_prev_ + par_.gain * (par_.target_repeat_next - n_prev / k), 0.0, 1.0);
    p_window_ = std::clamp(p_window_ + par_.gain * (par_.target_recur_window - n_window / k), 0.0, 1.0 - p_prev_);
  }
  for (int32_t j = 0; j < top_k_; ++j) last_use_[static_cast<size_t>(ids[j])] = t;
  ++t_;
}

namespace {

// Share of exp(−λ·r/E) over ranks r < E/2.
double top_half_of_skew(double lambda, int32_t n_expert) {
  double top = 0, all = 0;
  for (int32_t r = 0; r < n_expert; ++r) {
    const double w = std::exp(-lambda * r / n_expert);
    all += w;
    if (r < n_expert / 2) top += w;
  }
  return top / all;
}

// Statistics of `tokens` tokens of the process with parameters p (a fixed seed: calibration must be
// deterministic).
RoutingLocalityStats::Layer simulate(const LocalityParams& p, int32_t n_expert, int32_t top_k,
                                     int64_t tokens) {
  LocalityRouting gen(n_expert, top_k, 0x5eed, p);
  RoutingLocalityStats stats(1, n_expert, p.window);
  std::vector<int32_t> ids(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < tokens; ++t) {
    gen.next(ids.data());
    stats.observe(0, ids.data(), 1, top_k);
  }
  return stats.layer(0);
}

}  // namespace

double skew_for_top_half(double share, int32_t n_expert) {
  if (n_expert < 2 || share <= top_half_of_skew(0.0, n_expert)) return 0.0;
  double lo = 0.0, hi = 1.0;
  while (hi < 1e3 && top_half_of_skew(hi, n_expert) < share) hi *= 2;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (top_half_of_skew(mid, n_expert) < share ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<LocalityParams> locality_params_from_trace(const RoutingTrace& trace, int32_t n_layer,
                                                       int32_t n_expert, int32_t top_k) {
  const RoutingTraceHeader& h = trace.header;
  if (n_layer < 1 || h.n_layer < 1)
    fail(ErrorKind::invalid_arg, "locality from a trace: {} model layers, {} trace layers", n_layer,
         h.n_layer);
  constexpr int64_t kMinTokens = 64, kCalibrationTokens = 2048;
  RoutingLocalityStats measured(h.n_layer, h.n_expert, LocalityParams{}.window);
  for (int32_t l = 0; l < h.n_layer; ++l) {
    if (trace.tokens(l) < kMinTokens)
      fail(ErrorKind::invalid_arg,
           "locality from a trace: layer {} holds {} tokens; at least {} are needed", l,
           trace.tokens(l), kMinTokens);
    measured.observe(l, trace.ids[static_cast<size_t>(l)].data(),
                     static_cast<int32_t>(trace.tokens(l)), h.top_k);
  }
  std::vector<LocalityParams> out;
  for (int32_t l = 0; l < n_layer; ++l) {
    const int32_t src = static_cast<int32_t>(int64_t{l} * h.n_layer / n_layer);
    const RoutingLocalityStats::Layer m = measured.layer(src);
    LocalityParams p;
    p.target_repeat_next = m.repeat_next;
    p.target_recur_window = m.recur_window;
    p.initial_p_prev = m.repeat_next;
    p.initial_p_window = std::max(0.0, m.recur_window - m.repeat_next) / 2;
    // The analytic λ for the measured share, then a few corrections on the process's own output:
    // λ += λ(target) − λ(achieved), each with the analytic inverse as the slope.
    const double want = m.top_half_share, analytic = skew_for_top_half(want, n_expert);
    p.skew_lambda = analytic;
    for (int i = 0; i < 4 && analytic > 0; ++i) {
      const double got = simulate(p, n_expert, top_k, kCalibrationTokens).top_half_share;
      p.skew_lambda = std::max(0.0, p.skew_lambda + analytic - skew_for_top_half(got, n_expert));
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace ferry
