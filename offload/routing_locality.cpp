// The locality routing process (see routing.hpp and docs/routing.md) and its random generator.
#include <algorithm>
#include <cmath>

#include "offload/routing.hpp"
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

}  // namespace ferry
