// ExpertCache's victim choice (ordered sets, no scan) against the scan it replaced: the old
// `ExpertCache::victim` is kept here, as the reference, over a shadow copy of the per-slot use
// counts (the cache does not expose them). Long random traces with pins, clears, loading slots,
// size-class partitions, both policies and several half-lives, including tick jumps into exp2's
// subnormal and underflow range and same-tick uses (near-equal LRFU scores computed two ways):
// every insert must take the slot the scan takes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "offload/expert_cache.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// What the old scan read per slot beyond the cache's public state: updated as the cache does.
struct Shadow {
  std::vector<uint64_t> last;
  std::vector<double> freq;
  double half_life;

  double score(int32_t slot, uint64_t now) const {
    const auto s = static_cast<size_t>(slot);
    const double age = static_cast<double>(now - last[s]);
    return freq[s] * std::exp2(-age / half_life);
  }
  void used(int32_t slot, uint64_t now) {
    freq[static_cast<size_t>(slot)] = score(slot, now) + 1.0;
    last[static_cast<size_t>(slot)] = now;
  }
  void inserted(int32_t slot, uint64_t now) {
    freq[static_cast<size_t>(slot)] = 1.0;
    last[static_cast<size_t>(slot)] = now;
  }
};

// The scan ExpertCache::victim did up to 2026-12-05, verbatim but for the shadow's fields.
int32_t scan_victim(const ExpertCache& c, const Shadow& sh, EvictionPolicy policy, int32_t layer,
                    uint64_t now) {
  int32_t best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  uint64_t best_last = std::numeric_limits<uint64_t>::max();
  const auto [begin, end] = c.slots_of_layer(layer);
  for (int32_t slot = begin; slot < end; ++slot) {
    const auto s = static_cast<size_t>(slot);
    if (c.pins(slot) > 0 || c.state(slot) == SlotState::loading) continue;
    if (c.state(slot) == SlotState::empty) return slot;
    const double sc = policy == EvictionPolicy::lru ? 0.0 : sh.score(slot, now);
    if (sc < best_score || (sc == best_score && sh.last[s] < best_last)) {
      best = slot;
      best_score = sc;
      best_last = sh.last[s];
    }
  }
  return best;
}

struct TraceConfig {
  int32_t n_layer, n_expert;
  SlotPartition partition;  // empty: one pool
  int32_t n_slots;
};

// Runs `n_ops` random operations; returns how many inserts were compared with the scan (and how
// many of them evicted), failing the test at the first different victim. `cohorts`: the experts
// come in turn (nearly every use a miss) and a new one is used again 0-3 times in its tick, so
// freq 1, 2, 3, 4 at ticks h·log2(freq) apart have equal LRFU scores in real numbers and, by
// rounding, scores and keys an ulp apart in either order: the near-ties the key band resolves.
std::pair<int64_t, int64_t> run_trace(const TraceConfig& cfg, EvictionPolicy policy,
                                      double half_life, uint32_t seed, int32_t n_ops,
                                      bool cohorts) {
  std::mt19937 rng(seed);
  ExpertCache c(cfg.n_slots, cfg.n_layer, cfg.n_expert, policy, cfg.partition, half_life);
  Shadow sh{std::vector<uint64_t>(static_cast<size_t>(cfg.n_slots), 0),
            std::vector<double>(static_cast<size_t>(cfg.n_slots), 0.0), half_life};
  const auto pick = [&](int32_t n) { return static_cast<int32_t>(rng() % static_cast<uint32_t>(n)); };
  const auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  uint64_t now = 0;
  int64_t compared = 0, evicting = 0;
  std::vector<int32_t> pinned;
  int32_t next_key = 0;
  for (int32_t op = 0; op < n_ops; ++op) {
    // The clock: mostly several uses per tick (same-tick uses build freq = 2, 3, ... whose LRFU
    // scores tie with older single uses in real numbers), sometimes a jump of ~990-1100
    // half-lives (subnormal and zero scores) or a long idle stretch.
    if (chance(0.3)) ++now;
    if (chance(0.002))
      now += static_cast<uint64_t>(std::ceil(half_life * (980.0 + pick(130))));
    if (chance(0.001)) now += static_cast<uint64_t>(pick(50000));
    // A skewed key: a few experts carry most uses, so scores differ as in a decode.
    int32_t layer = pick(cfg.n_layer);
    int32_t expert = chance(0.6) ? pick(std::max(1, cfg.n_expert / 8)) : pick(cfg.n_expert);
    if (cohorts) {
      next_key = (next_key + 1) % (cfg.n_layer * cfg.n_expert);
      layer = next_key % cfg.n_layer;
      expert = next_key / cfg.n_layer;
    }
    const int32_t r = pick(100);
    if (r < 60) {
      const int32_t slot = c.access(layer, expert, now);
      if (slot >= 0) {
        sh.used(slot, now);
        continue;
      }
      const int32_t want = scan_victim(c, sh, policy, layer, now);
      const bool evicts = want >= 0 && c.state(want) != SlotState::empty;
      const int32_t got = c.insert(layer, expert, now);
      ++compared;
      if (evicts) ++evicting;
      if (got != want) {
        ADD_FAILURE() << "op " << op << " tick " << now << " layer " << layer << ": victim " << got
                      << ", the scan takes " << want;
        return {compared, evicting};
      }
      if (got < 0) continue;
      sh.inserted(got, now);
      if (chance(0.7)) c.mark_ready(got);  // else stays loading, like a queued copy
      for (int32_t again = cohorts ? pick(4) : 0; again > 0; --again) {
        c.access(layer, expert, now);
        sh.used(got, now);
      }
    } else if (r < 72) {
      const int32_t slot = pick(cfg.n_slots);  // pin anything, empty and loading slots too
      c.pin(slot);
      pinned.push_back(slot);
    } else if (r < 86) {
      if (pinned.empty()) continue;
      const size_t at = static_cast<size_t>(pick(static_cast<int32_t>(pinned.size())));
      c.unpin(pinned[at]);
      pinned.erase(pinned.begin() + static_cast<std::ptrdiff_t>(at));
    } else if (r < 95) {
      const int32_t slot = pick(cfg.n_slots);
      if (c.state(slot) == SlotState::loading) c.mark_ready(slot);
    } else {
      const int32_t slot = pick(cfg.n_slots);
      if (c.pins(slot) == 0) c.clear(slot);
    }
  }
  return {compared, evicting};
}

TEST(ExpertCacheVictim, SameVictimAsTheScan) {
  // One pool; three size classes (one of them empty) over 6 layers.
  const std::vector<TraceConfig> configs{
      {4, 32, {}, 40},
      {6, 24, {{0, 2, 2, 0, 2, 0}, {20, 0, 28}}, 48},
  };
  for (const TraceConfig& cfg : configs)
    for (EvictionPolicy policy : {EvictionPolicy::lru, EvictionPolicy::lrfu})
      for (double half_life : {0.5, 1.0, 1.5, 3.0, 4.0, 5.0, 7.3, 64.0}) {
        if (policy == EvictionPolicy::lru && half_life != 4.0) continue;  // LRU ignores it
        for (uint32_t seed = 1; seed <= 4; ++seed) {
          const bool cohorts = seed % 2 == 0;
          const auto [compared, evicting] =
              run_trace(cfg, policy, half_life, seed * 7919 + static_cast<uint32_t>(cfg.n_slots),
                        40000, cohorts);
          SCOPED_TRACE(testing::Message() << cfg.n_slots << " slots, half-life " << half_life
                                          << (cohorts ? ", cohorts" : ""));
          // Enough decisions, most of them evictions, for the comparison to mean something.
          EXPECT_GT(compared, 3000);
          EXPECT_GT(evicting, compared / 2);
          if (HasFailure()) return;
        }
      }
}

// A decode hit is used, pinned for its step and unpinned after: its slot re-enters the ordered
// sets once, with its final key, when the next insert needs a victim (not on each of the three).
TEST(ExpertCacheVictim, PinnedHitIsListedOnce) {
  for (EvictionPolicy policy : {EvictionPolicy::lrfu, EvictionPolicy::lru}) {
    SCOPED_TRACE(policy == EvictionPolicy::lru ? "lru" : "lrfu");
    constexpr int32_t kSlots = 16;
    ExpertCache c(kSlots, 1, 64, policy);
    for (int32_t e = 0; e < kSlots; ++e) c.mark_ready(c.insert(0, e, 0));
    const uint64_t listed0 = c.work().listed;
    // One step at tick 1: experts 0..7 used (twice each, as a prefill's tokens would), pinned.
    for (int32_t e = 0; e < 8; ++e) {
      const int32_t slot = c.access(0, e, 1);
      c.access(0, e, 1);
      c.pin(slot);
    }
    EXPECT_EQ(c.work().listed, listed0);  // nothing listed while the step runs
    for (int32_t e = 0; e < 8; ++e) c.unpin(c.find(0, e));
    // The next miss lists the 8 hits once each, and the last slot filled (queued by its
    // mark_ready; each insert before lists the slots queued before it).
    const int32_t slot = c.insert(0, 20, 1);
    EXPECT_EQ(c.work().listed - listed0, 8u + 1u);
    EXPECT_EQ(slot, 8);  // the first slot not used at tick 1
    // LRU orders by last use only: a second use in the same tick does not move the slot.
    c.mark_ready(slot);
    c.insert(0, 21, 1);
    const uint64_t listed1 = c.work().listed;
    c.access(0, 0, 1);
    c.insert(0, 22, 1);
    EXPECT_EQ(c.work().listed - listed1, policy == EvictionPolicy::lru ? 0u : 1u);
  }
}

// Every slot of an initial uniform set has the same LRFU key, last use and frequency: they score
// exactly alike, so the victim is the first of them without scoring the others.
TEST(ExpertCacheVictim, EqualKeysScoredOnce) {
  constexpr int32_t kSlots = 1000;
  ExpertCache c(kSlots, 1, 2 * kSlots, EvictionPolicy::lrfu);
  for (int32_t e = 0; e < kSlots; ++e) c.mark_ready(c.insert(0, e, 0));
  const uint64_t scored0 = c.work().scored;
  EXPECT_EQ(c.insert(0, kSlots, 1), 0);
  EXPECT_EQ(c.work().scored - scored0, 1u);  // one score for the run (the scan: 1000)
  // Slot 0 now holds a newer expert: the run of 999 left is still scored once.
  c.mark_ready(0);
  const uint64_t scored1 = c.work().scored;
  EXPECT_EQ(c.insert(0, kSlots + 1, 2), 1);
  EXPECT_EQ(c.work().scored - scored1, 1u);
}

// The cache relies on ages >= 0 (its LRFU order and the underflow shortcut do).
TEST(ExpertCacheVictim, TicksNeverGoBack) {
  ExpertCache c(4, 1, 8, EvictionPolicy::lrfu);
  c.mark_ready(c.insert(0, 0, 10));
  EXPECT_THROW(c.access(0, 0, 9), Error);
  EXPECT_THROW(c.insert(0, 1, 9), Error);
  EXPECT_EQ(c.access(0, 0, 10), 0);
}

}  // namespace
}  // namespace ferry
