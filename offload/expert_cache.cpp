#include "offload/expert_cache.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

#include "runtime/core/error.hpp"

namespace ferry {

ExpertCache::ExpertCache(int32_t n_slots, int32_t n_layer, int32_t n_expert, EvictionPolicy policy,
                         const SlotPartition& partition, double half_life_ticks)
    : policy_(policy), n_layer_(n_layer), n_expert_(n_expert), half_life_(half_life_ticks) {
  if (n_slots < 0 || n_layer <= 0 || n_expert <= 0 || half_life_ticks <= 0)
    fail(ErrorKind::invalid_arg, "expert cache: {} slots, {} layers, {} experts, half-life {}",
         n_slots, n_layer, n_expert, half_life_ticks);
  const auto n = static_cast<size_t>(n_slots);
  key_.assign(n, -1);
  state_.assign(n, SlotState::empty);
  pins_.assign(n, 0);
  last_.assign(n, 0);
  freq_.assign(n, 0.0);
  at_last_.resize(n);
  at_key_.resize(n);
  in_sets_.assign(n, 0);
  queued_.assign(n, 0);
  where_.assign(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), -1);
  layer_group_.assign(static_cast<size_t>(n_layer), 0);
  slot_group_.assign(n, 0);
  std::vector<int32_t> group_slots{n_slots};
  if (!partition.layer_group.empty() || !partition.group_slots.empty()) {
    const auto n_group = static_cast<int32_t>(partition.group_slots.size());
    if (static_cast<int32_t>(partition.layer_group.size()) != n_layer ||
        std::accumulate(partition.group_slots.begin(), partition.group_slots.end(), int64_t{0}) !=
            n_slots ||
        std::any_of(partition.group_slots.begin(), partition.group_slots.end(),
                    [](int32_t g) { return g < 0; }) ||
        std::any_of(partition.layer_group.begin(), partition.layer_group.end(),
                    [&](int32_t g) { return g < 0 || g >= n_group; }))
      fail(ErrorKind::invalid_arg,
           "expert cache: a partition needs a group for each of {} layers and group slot counts "
           "that sum to {} (got {} layers, {} groups)",
           n_layer, n_slots, partition.layer_group.size(), n_group);
    group_slots = partition.group_slots;
    layer_group_ = partition.layer_group;
  }
  groups_.resize(group_slots.size());
  int32_t begin = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].begin = begin;
    begin += group_slots[g];
    groups_[g].end = begin;
    for (int32_t slot = groups_[g].begin; slot < groups_[g].end; ++slot) {
      slot_group_[static_cast<size_t>(slot)] = static_cast<int32_t>(g);
      groups_[g].free.insert(groups_[g].free.end(), slot);
    }
  }
}

int32_t ExpertCache::find(int32_t layer, int32_t expert) const {
  return where_[static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) +
                static_cast<size_t>(expert)];
}

int32_t ExpertCache::layer_of(int32_t slot) const {
  const int32_t k = key_[static_cast<size_t>(slot)];
  return k < 0 ? -1 : k / n_expert_;
}

int32_t ExpertCache::expert_of(int32_t slot) const {
  const int32_t k = key_[static_cast<size_t>(slot)];
  return k < 0 ? -1 : k % n_expert_;
}

double ExpertCache::score(int32_t slot, uint64_t now) const {
  const auto s = static_cast<size_t>(slot);
  const double age = static_cast<double>(now - last_[s]);
  return freq_[s] * std::exp2(-age / half_life_);
}

void ExpertCache::check_tick(uint64_t now) {
  if (now < latest_tick_)
    fail(ErrorKind::internal, "expert cache: tick {} after tick {} (ticks never go back)", now,
         latest_tick_);
  latest_tick_ = now;
}

double ExpertCache::lrfu_key(int32_t slot) const {
  const auto s = static_cast<size_t>(slot);
  return std::log2(freq_[s]) + static_cast<double>(last_[s]) / half_life_;
}

ExpertCache::Group* ExpertCache::listing_group(int32_t slot) {
  const auto s = static_cast<size_t>(slot);
  if (pins_[s] > 0 || state_[s] == SlotState::loading) return nullptr;
  return &groups_[static_cast<size_t>(slot_group_[s])];
}

// A ready slot leaves the sets at once (its key is about to change, or it becomes pinned or
// loading), an empty one leaves `free`. The node is kept for the next insertion.
void ExpertCache::unlist(int32_t slot) {
  const auto s = static_cast<size_t>(slot);
  Group& g = groups_[static_cast<size_t>(slot_group_[s])];
  if (in_sets_[s]) {
    in_sets_[s] = 0;
    if (policy_ == EvictionPolicy::lru)
      spare_last_.push_back(g.by_last.extract(at_last_[s]));
    else
      spare_key_.push_back(g.by_key.extract(at_key_[s]));
    return;
  }
  if (listing_group(slot) && state_[s] == SlotState::empty) g.free.erase(slot);
}

// An empty slot enters `free` at once (rare: start-up and failed loads); a ready one is queued
// for flush(), so the pin that usually follows a hit costs nothing.
void ExpertCache::list(int32_t slot) {
  Group* g = listing_group(slot);
  if (!g) return;
  const auto s = static_cast<size_t>(slot);
  if (state_[s] == SlotState::empty) {
    g->free.insert(slot);
    return;
  }
  if (in_sets_[s] || queued_[s]) return;
  queued_[s] = 1;
  pending_.push_back(slot);
}

namespace {

// Inserts `value` reusing a node of `spare` when it has one. The hint: a slot is usually listed
// after a use at the latest tick, so it goes last (amortised O(1) when right).
template <class Set>
typename Set::iterator insert_reusing(Set& set, std::vector<typename Set::node_type>& spare,
                                      typename Set::value_type value) {
  if (spare.empty()) return set.insert(set.end(), value);
  typename Set::node_type node = std::move(spare.back());
  spare.pop_back();
  node.value() = value;
  return set.insert(set.end(), std::move(node));
}

}  // namespace

void ExpertCache::flush() {
  for (const int32_t slot : pending_) {
    const auto s = static_cast<size_t>(slot);
    queued_[s] = 0;
    // Pinned, loading or emptied since it was queued: its next list() queues it again.
    if (pins_[s] > 0 || state_[s] != SlotState::ready || in_sets_[s]) continue;
    Group& g = groups_[static_cast<size_t>(slot_group_[s])];
    if (policy_ == EvictionPolicy::lru)
      at_last_[s] = insert_reusing(g.by_last, spare_last_, {last_[s], slot});
    else
      at_key_[s] = insert_reusing(g.by_key, spare_key_, {lrfu_key(slot), last_[s], freq_[s], slot});
    in_sets_[s] = 1;
    ++work_.listed;
  }
  pending_.clear();
}

int32_t ExpertCache::access(int32_t layer, int32_t expert, uint64_t now) {
  check_tick(now);
  const int32_t slot = find(layer, expert);
  if (slot < 0) {
    ++c_.misses;
    return -1;
  }
  ++c_.hits;
  const auto s = static_cast<size_t>(slot);
  // LRU orders by last use only: a second use in the same tick leaves its place unchanged.
  if (policy_ == EvictionPolicy::lru && last_[s] == now) return slot;
  unlist(slot);
  freq_[s] = score(slot, now) + 1.0;
  last_[s] = now;
  max_freq_ = std::max(max_freq_, freq_[s]);
  list(slot);
  return slot;
}

int32_t ExpertCache::victim(int32_t layer, uint64_t now) {
  flush();
  const Group& g = groups_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
  if (!g.free.empty()) return *g.free.begin();
  // LRU: every score is equal, so the oldest last use, then the lowest index.
  if (policy_ == EvictionPolicy::lru) return g.by_last.empty() ? -1 : g.by_last.begin()->second;
  return g.by_key.empty() ? -1 : lrfu_victim(g, now);
}

// The slot a scan of the group's ready unpinned slots would choose: the lowest score() (as
// computed, rounding included), ties to the oldest last use, then the lowest index.
//
// In real numbers log2(score) = key − now/half_life with key = log2(freq) + last/half_life, so
// the key orders the scores. The computed values differ from the real ones by rounding, which
// is what this function accounts for, in two regimes:
//  - Underflow: exp2(−age/half_life) rounds to 0 once the age passes ~1075 half-lives, whatever
//    the frequency (freq >= 1, so a nonzero exp2 gives a nonzero score). The zero scores are
//    therefore exactly those of the oldest slots, and their keys are below
//    now/half_life + log2(max freq) − 1074: inside the band below, which compares them exactly
//    (0 ties, then the oldest, then the lowest index) as the scan did. (A fast path through a
//    set ordered by last use did this until 2026-12-06; keeping that set up to date on every
//    hit cost as much as the LRFU set itself, for a case a decode never meets.)
//  - Otherwise every score is compared exactly among the slots whose key lies in a band above
//    the lowest key, and no slot above the band can have a computed score <= the lowest-key
//    slot's. While exp2's result is a normal double (argument >= −1000, i.e. key − now/half_life
//    >= log2(max freq) − 1000) the computed score is within ~1e-12 relative of the real one
//    (exp2's argument has relative error 2^-53 on a magnitude <= ~1100; exp2 and the product
//    round by an ulp) and the keys within 2^-50·(|key| + 64) of theirs, so a band of
//    2^-36·(64 + |k0| + now/half_life) is ample. Nearer underflow exp2 is subnormal and loses
//    relative precision: the lowest slot's score is then below max_freq·2^-1000 (plus an
//    absolute rounding of (max_freq + 1)·2^-1074), and the band reaches up to real scores of
//    max_freq·2^-990 — ~1000 times more — so a slot above it still scores higher.
// The band usually holds one slot or a few; only slots aged over 990 half-lives (none in a
// decode that evicts long before that) can widen it, and then it is scanned like the old scan.
// Slots of equal key, last use and frequency do widen it (every slot of the initial uniform
// set, the slots admitted in one token), but they score exactly alike and the first of such a
// run in the set has the lowest index, so it beats the rest of the run on the tie-breaks: only
// it is scored, and the rest is skipped with one search.
int32_t ExpertCache::lrfu_victim(const Group& g, uint64_t now) {
  const double k0 = g.by_key.begin()->key;
  const double t = static_cast<double>(now) / half_life_;
  const double band = std::ldexp(64.0 + std::abs(k0) + std::abs(t), -36);
  const double top = std::max(k0 + band, t + std::log2(max_freq_) - 990.0);
  int32_t best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  uint64_t best_last = std::numeric_limits<uint64_t>::max();
  for (auto it = g.by_key.begin(); it != g.by_key.end() && it->key <= top;) {
    const int32_t slot = it->slot;
    const double sc = score(slot, now);
    ++work_.scored;
    const uint64_t last = last_[static_cast<size_t>(slot)];
    if (sc < best_score || (sc == best_score && (last < best_last ||
                                                 (last == best_last && slot < best)))) {
      best = slot;
      best_score = sc;
      best_last = last;
    }
    const KeyEntry run_end{it->key, it->last, it->freq, std::numeric_limits<int32_t>::max()};
    const auto next = std::next(it);
    it = next != g.by_key.end() && next->key == it->key && next->last == it->last &&
                 next->freq == it->freq
             ? g.by_key.upper_bound(run_end)
             : next;
  }
  return best;
}

int32_t ExpertCache::insert(int32_t layer, int32_t expert, uint64_t now) {
  if (layer < 0 || layer >= n_layer_ || expert < 0 || expert >= n_expert_)
    fail(ErrorKind::internal, "expert cache: insert of layer {} expert {} (cache of {} × {})",
         layer, expert, n_layer_, n_expert_);
  if (find(layer, expert) >= 0)
    fail(ErrorKind::internal, "expert cache: layer {} expert {} inserted twice", layer, expert);
  check_tick(now);
  const int32_t slot = victim(layer, now);
  if (slot < 0) return -1;
  const auto s = static_cast<size_t>(slot);
  unlist(slot);
  if (key_[s] >= 0) {
    where_[static_cast<size_t>(key_[s])] = -1;
    ++c_.evictions;
  }
  key_[s] = layer * n_expert_ + expert;
  where_[static_cast<size_t>(key_[s])] = slot;
  state_[s] = SlotState::loading;
  ++version_;
  last_[s] = now;
  freq_[s] = 1.0;
  ++c_.inserts;  // loading: listed again by mark_ready
  return slot;
}

void ExpertCache::mark_ready(int32_t slot) {
  if (key_[static_cast<size_t>(slot)] < 0)
    fail(ErrorKind::internal, "expert cache: slot {} is empty", slot);
  unlist(slot);
  state_[static_cast<size_t>(slot)] = SlotState::ready;
  list(slot);
  ++version_;
}

void ExpertCache::clear(int32_t slot) {
  const auto s = static_cast<size_t>(slot);
  if (pins_[s] > 0) fail(ErrorKind::internal, "expert cache: clearing pinned slot {}", slot);
  unlist(slot);
  if (key_[s] >= 0) where_[static_cast<size_t>(key_[s])] = -1;
  key_[s] = -1;
  state_[s] = SlotState::empty;
  freq_[s] = 0.0;
  list(slot);
  ++version_;
}

void ExpertCache::pin(int32_t slot) {
  unlist(slot);
  ++pins_[static_cast<size_t>(slot)];
}

void ExpertCache::unpin(int32_t slot) {
  if (pins_[static_cast<size_t>(slot)] <= 0)
    fail(ErrorKind::internal, "expert cache: unpin of unpinned slot {}", slot);
  --pins_[static_cast<size_t>(slot)];
  list(slot);
}

std::pair<int32_t, int32_t> ExpertCache::slots_of_layer(int32_t layer) const {
  const Group& g = groups_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
  return {g.begin, g.end};
}

int32_t ExpertCache::resident_in_layer(int32_t layer) const {
  int32_t n = 0;
  const auto [begin, end] = slots_of_layer(layer);
  for (int32_t slot = begin; slot < end; ++slot)
    if (state_[static_cast<size_t>(slot)] == SlotState::ready && layer_of(slot) == layer) ++n;
  return n;
}

}  // namespace ferry
