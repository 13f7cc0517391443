// ExpertCache policy: bookkeeping, pins (never evicted), and hit rates of the policies on synthetic
// routing traces with skewed popularity and temporal locality (the shape of Qwen3-30B-A3B routing:
// a token reuses many of the previous tokens' experts, and half the experts carry most selections).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "offload/expert_cache.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

TEST(ExpertCache, InsertFindEvictAndCounters) {
  ExpertCache c(3, 2, 4, EvictionPolicy::lru);
  EXPECT_EQ(c.find(0, 1), -1);
  EXPECT_EQ(c.access(0, 1, 1), -1);
  const int32_t a = c.insert(0, 1, 1), b = c.insert(1, 2, 2), d = c.insert(0, 3, 3);
  EXPECT_EQ(std::set<int32_t>({a, b, d}).size(), 3u);
  EXPECT_EQ(c.state(a), SlotState::loading);
  c.mark_ready(a);
  EXPECT_EQ(c.find(0, 1), a);
  EXPECT_EQ(c.layer_of(b), 1);
  EXPECT_EQ(c.expert_of(b), 2);
  c.mark_ready(b);
  c.mark_ready(d);
  EXPECT_EQ(c.access(0, 1, 4), a);  // a used last: b is the LRU victim
  const int32_t e = c.insert(1, 0, 5);
  EXPECT_EQ(e, b);
  EXPECT_EQ(c.find(1, 2), -1);
  EXPECT_EQ(c.counters().evictions, 1u);
  EXPECT_EQ(c.counters().hits, 1u);
  EXPECT_EQ(c.counters().misses, 1u);
  EXPECT_EQ(c.resident_in_layer(0), 2);
  EXPECT_THROW(c.insert(0, 1, 6), Error);  // already present
  EXPECT_THROW(c.unpin(a), Error);
}

TEST(ExpertCache, PinnedAndLoadingSlotsAreNeverEvicted) {
  std::mt19937 rng(42);
  ExpertCache c(8, 4, 16, EvictionPolicy::lrfu);
  std::vector<int32_t> pinned;
  for (uint64_t t = 1; t < 2000; ++t) {
    const int32_t l = static_cast<int32_t>(rng() % 4), e = static_cast<int32_t>(rng() % 16);
    if (c.access(l, e, t) >= 0) continue;
    const int32_t s = c.insert(l, e, t);
    if (s < 0) {
      // Only legal when every slot is pinned or loading.
      for (int32_t i = 0; i < c.n_slots(); ++i)
        EXPECT_TRUE(c.pins(i) > 0 || c.state(i) == SlotState::loading) << "slot " << i;
      continue;
    }
    for (int32_t p : pinned) EXPECT_NE(s, p) << "evicted a pinned slot";
    // Keep some slots pinned and some loading for a while, like queued GPU work and prefetches.
    if (rng() % 3 == 0) {
      c.pin(s);
      pinned.push_back(s);
    } else if (rng() % 3 == 0) {
      continue;  // stays loading until a later mark_ready
    }
    c.mark_ready(s);
    if (pinned.size() > 4 || (rng() % 5 == 0 && !pinned.empty())) {
      const int32_t p = pinned.front();
      pinned.erase(pinned.begin());
      c.unpin(p);
      if (c.state(p) == SlotState::loading) c.mark_ready(p);
    }
    if (rng() % 2 == 0)
      for (int32_t i = 0; i < c.n_slots(); ++i)
        if (c.state(i) == SlotState::loading) c.mark_ready(i);
  }
  EXPECT_GT(c.counters().evictions, 100u);
}

// A routing trace: per layer, each token picks k distinct experts; with probability p_reuse a slot
// repeats one of the previous `window` tokens' experts, else draws by a skewed popularity
// (exp(-lambda·rank/E), a random rank order per layer).
std::vector<int32_t> make_trace(int32_t L, int32_t E, int32_t K, int32_t T, double p_reuse,
                                double lambda, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> ids(static_cast<size_t>(T) * L * K);  // (T, L, K)
  for (int32_t l = 0; l < L; ++l) {
    std::vector<int32_t> perm(static_cast<size_t>(E));
    for (int32_t e = 0; e < E; ++e) perm[static_cast<size_t>(e)] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<double> cdf(static_cast<size_t>(E));
    double acc = 0;
    for (int32_t r = 0; r < E; ++r) cdf[static_cast<size_t>(r)] = acc += std::exp(-lambda * r / E);
    for (int32_t t = 0; t < T; ++t) {
      std::vector<int32_t> chosen;
      while (static_cast<int32_t>(chosen.size()) < K) {
        int32_t e;
        if (t > 0 && u(rng) < p_reuse) {
          const int32_t back =
              1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min(t, 8)));
          e = ids[(static_cast<size_t>(t - back) * L + l) * K + rng() % static_cast<uint32_t>(K)];
        } else {
          const double x = u(rng) * acc;
          e = perm[static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), x) - cdf.begin())];
        }
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      std::copy(chosen.begin(), chosen.end(),
                ids.begin() + (static_cast<ptrdiff_t>(t) * L + l) * K);
    }
  }
  return ids;
}

// Trace C: each layer its own skew (1 + layer), built from single-layer traces.
std::vector<int32_t> per_layer_skew_trace(int32_t L, int32_t E, int32_t K, int32_t T) {
  std::vector<int32_t> ids(static_cast<size_t>(T) * L * K);
  for (int32_t l = 0; l < L; ++l) {
    const auto one = make_trace(1, E, K, T, 0.45, 1.0 + l, 100 + static_cast<uint32_t>(l));
    for (int32_t t = 0; t < T; ++t)
      std::copy(one.begin() + t * K, one.begin() + (t + 1) * K,
                ids.begin() + (static_cast<ptrdiff_t>(t) * L + l) * K);
  }
  return ids;
}

// One group per layer, slots split evenly (the first slots % L layers get one more).
SlotPartition per_layer(int32_t L, int32_t slots) {
  SlotPartition p;
  for (int32_t l = 0; l < L; ++l) {
    p.layer_group.push_back(l);
    p.group_slots.push_back(slots / L + (l < slots % L ? 1 : 0));
  }
  return p;
}

double hit_rate(const std::vector<int32_t>& ids, int32_t L, int32_t E, int32_t K, int32_t T,
                int32_t slots, EvictionPolicy pol, const SlotPartition& part, int32_t warmup,
                double half_life = 4.0) {
  ExpertCache c(slots, L, E, pol, part, half_life);
  for (int32_t t = 0; t < T; ++t) {
    if (t == warmup) c.reset_counters();
    for (int32_t l = 0; l < L; ++l)
      for (int32_t k = 0; k < K; ++k) {
        const int32_t e = ids[(static_cast<size_t>(t) * L + l) * K + k];
        if (c.access(l, e, static_cast<uint64_t>(t) + 1) < 0) {
          const int32_t s = c.insert(l, e, static_cast<uint64_t>(t) + 1);
          if (s < 0) return -1.0;  // nothing pinned here: cannot happen
          c.mark_ready(s);
        }
      }
  }
  const auto& n = c.counters();
  return static_cast<double>(n.hits) / static_cast<double>(n.hits + n.misses);
}

TEST(ExpertCache, PoliciesOnLocalityTraces) {
  // 8 layers × 64 experts, top-8, 600 tokens; caches of 25% / 40% / 60% of the experts. Trace A
  // (reuse 0.45, skew 4.8) is the one the LRFU half-life was chosen on; trace B (reuse 0.6,
  // skew 3) and trace C (per-layer skews 1..8) are held out.
  const int32_t L = 8, E = 64, K = 8, T = 600;
  const std::vector<std::pair<const char*, std::vector<int32_t>>> traces = {
      {"A", make_trace(L, E, K, T, 0.45, 4.8, 7)},
      {"B", make_trace(L, E, K, T, 0.6, 3.0, 8)},
      {"C", per_layer_skew_trace(L, E, K, T)}};
  std::printf("trace resident  lru/pool  lrfu/pool  lru/layer  lrfu/layer\n");
  for (const auto& [name, trace] : traces) {
    for (double frac : {0.25, 0.40, 0.60}) {
      const auto slots = static_cast<int32_t>(frac * L * E);
      const double lru = hit_rate(trace, L, E, K, T, slots, EvictionPolicy::lru, {}, 100);
      const double lrfu = hit_rate(trace, L, E, K, T, slots, EvictionPolicy::lrfu, {}, 100);
      const double lru_l =
          hit_rate(trace, L, E, K, T, slots, EvictionPolicy::lru, per_layer(L, slots), 100);
      const double lrfu_l =
          hit_rate(trace, L, E, K, T, slots, EvictionPolicy::lrfu, per_layer(L, slots), 100);
      std::printf("%5s %7.0f%%  %8.3f  %9.3f  %9.3f  %10.3f\n", name, frac * 100, lru, lrfu, lru_l,
                  lrfu_l);
      // A cache must beat its size on a skewed, local trace, and recency+frequency must not lose
      // to recency alone.
      EXPECT_GT(lru, frac) << name;
      EXPECT_GE(lrfu, lru - 0.005) << name << " " << frac;
    }
  }
  for (double hl : {2.0, 4.0, 8.0, 16.0, 64.0}) {
    std::printf("LRFU half-life %4.0f on A:", hl);
    for (double frac : {0.25, 0.40, 0.60})
      std::printf(" %.3f",
                  hit_rate(traces[0].second, L, E, K, T, static_cast<int32_t>(frac * L * E),
                           EvictionPolicy::lrfu, {}, 100, hl));
    std::printf("\n");
  }
  // Uniform, memoryless routing: any policy's hit rate is the resident fraction (±noise).
  const auto flat = make_trace(L, E, K, T, 0.0, 0.0, 9);
  const double h = hit_rate(flat, L, E, K, T, L * E / 2, EvictionPolicy::lrfu, {}, 100);
  EXPECT_NEAR(h, 0.5, 0.05);
}

TEST(ExpertCache, ClassPartitionEvictsOnlyWithinTheClass) {
  // Layers 0 and 2 in group 0 (slots 0-1), layer 1 in group 1 (slots 2-4).
  const SlotPartition part{{0, 1, 0}, {2, 3}};
  ExpertCache c(5, 3, 8, EvictionPolicy::lru, part);
  EXPECT_EQ(c.slots_of_layer(2), std::make_pair(0, 2));
  EXPECT_EQ(c.slots_of_layer(1), std::make_pair(2, 5));
  const int32_t a = c.insert(0, 1, 1), b = c.insert(2, 5, 2);
  EXPECT_LT(a, 2);
  EXPECT_LT(b, 2);
  c.mark_ready(a);
  c.mark_ready(b);
  // Group 0 is full, group 1 empty: a layer-0 expert evicts in group 0 (the LRU, a), never taking
  // one of group 1's free slots (a slot of the wrong size).
  const int32_t d = c.insert(0, 2, 3);
  EXPECT_EQ(d, a);
  EXPECT_EQ(c.find(0, 1), -1);
  c.mark_ready(d);
  const int32_t e = c.insert(1, 0, 4);
  EXPECT_GE(e, 2);
  // Every slot of group 0 pinned: no slot, nothing changed, even though group 1 has free slots.
  c.pin(b);
  c.pin(d);
  EXPECT_EQ(c.insert(2, 7, 5), -1);
  EXPECT_EQ(c.find(0, 2), d);
  EXPECT_EQ(c.resident_in_layer(2), 1);
  // A partition that does not cover the layers or the slots is refused.
  EXPECT_THROW(ExpertCache(5, 3, 8, EvictionPolicy::lru, SlotPartition{{0, 1}, {2, 3}}), Error);
  EXPECT_THROW(ExpertCache(5, 3, 8, EvictionPolicy::lru, SlotPartition{{0, 1, 0}, {2, 2}}), Error);
  EXPECT_THROW(ExpertCache(5, 3, 8, EvictionPolicy::lru, SlotPartition{{0, 2, 0}, {2, 3}}), Error);
}

// Slot layouts at the same budget (bytes) on the locality traces, for the 0004 decision: a
// Q4_K_M-like model whose layers 0, 3, 6, 7 have Q6_K downs (experts 2039808 B, the others
// 1769472 B, as the qwen35moe small preset). padded: one pool of slots of the largest size (the
// layout before size classes); classes: exact-size slots, evicting within the class; per-layer:
// exact sizes, one group per layer; pool-exact: one pool with the classes' slot count, as if any
// expert could take any slot — an upper bound for a variable-size (slab) allocator, which would
// also have to find room of the right size.
TEST(ExpertCache, SizeClassesOnLocalityTraces) {
  const int32_t L = 8, E = 64, K = 8, T = 600;
  const uint64_t large = 2039808, small = 1769472;
  std::vector<uint64_t> bytes(L, small);
  for (int32_t l : {0, 3, 6, 7}) bytes[static_cast<size_t>(l)] = large;
  const std::vector<std::pair<const char*, std::vector<int32_t>>> traces = {
      {"A", make_trace(L, E, K, T, 0.45, 4.8, 7)},
      {"B", make_trace(L, E, K, T, 0.6, 3.0, 8)},
      {"C", per_layer_skew_trace(L, E, K, T)}};
  std::printf("trace budget  padded(slots)  classes(slots)  per-layer  pool-exact\n");
  for (const auto& [name, trace] : traces)
    for (double frac : {0.25, 0.40, 0.60}) {
      uint64_t all = 0;
      for (uint64_t b : bytes) all += b * E;
      const auto budget = static_cast<uint64_t>(frac * static_cast<double>(all));
      const auto padded = static_cast<int32_t>(budget / large);
      // Uniform placement (as make_plan without a profile): k per layer, one more while it fits.
      uint64_t one_each = 0;
      for (uint64_t b : bytes) one_each += b;
      const auto k = static_cast<int32_t>(budget / one_each);
      uint64_t left = budget - static_cast<uint64_t>(k) * one_each;
      std::vector<int32_t> per(L, k);
      for (int32_t l = 0; l < L; ++l)
        if (bytes[static_cast<size_t>(l)] <= left)
          ++per[static_cast<size_t>(l)], left -= bytes[static_cast<size_t>(l)];
      SlotPartition classes{{0, 1, 1, 0, 1, 1, 0, 0}, {0, 0}}, layers;
      for (int32_t l = 0; l < L; ++l) {
        classes.group_slots[static_cast<size_t>(classes.layer_group[static_cast<size_t>(l)])] +=
            per[static_cast<size_t>(l)];
        layers.layer_group.push_back(l);
        layers.group_slots.push_back(per[static_cast<size_t>(l)]);
      }
      const int32_t exact = classes.group_slots[0] + classes.group_slots[1];
      const double h_padded = hit_rate(trace, L, E, K, T, padded, EvictionPolicy::lrfu, {}, 100);
      const double h_classes =
          hit_rate(trace, L, E, K, T, exact, EvictionPolicy::lrfu, classes, 100);
      const double h_layers = hit_rate(trace, L, E, K, T, exact, EvictionPolicy::lrfu, layers, 100);
      const double h_pool = hit_rate(trace, L, E, K, T, exact, EvictionPolicy::lrfu, {}, 100);
      std::printf("%5s %5.0f%%  %6.3f (%3d)   %6.3f (%3d)    %6.3f     %6.3f\n", name, frac * 100,
                  h_padded, padded, h_classes, exact, h_layers, h_pool);
      EXPECT_GT(exact, padded);
      EXPECT_GT(h_classes, h_padded) << name << " " << frac;
      EXPECT_LE(h_classes, h_pool + 0.01) << name << " " << frac;
    }
}

}  // namespace
}  // namespace ferry
