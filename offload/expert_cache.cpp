#include "offload/expert_cache.hpp"

#include <algorithm>
#include <cmath>
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
  where_.assign(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), -1);
  group_begin_.assign(static_cast<size_t>(n_layer), 0);
  group_end_.assign(static_cast<size_t>(n_layer), n_slots);
  if (partition.layer_group.empty() && partition.group_slots.empty()) return;
  const auto n_group = static_cast<int32_t>(partition.group_slots.size());
  if (static_cast<int32_t>(partition.layer_group.size()) != n_layer ||
      std::accumulate(partition.group_slots.begin(), partition.group_slots.end(), int64_t{0}) !=
          n_slots ||
      std::any_of(partition.group_slots.begin(), partition.group_slots.end(),
                  [](int32_t g) { return g < 0; }) ||
      std::any_of(partition.layer_group.begin(), partition.layer_group.end(),
                  [&](int32_t g) { return g < 0 || g >= n_group; }))
    fail(ErrorKind::invalid_arg,
         "expert cache: a partition needs a group for each of {} layers and group slot counts that "
         "sum to {} "
         "(got {} layers, {} groups)",
         n_layer, n_slots, partition.layer_group.size(), n_group);
  std::vector<int32_t> begin(static_cast<size_t>(n_group) + 1, 0);
  for (int32_t g = 0; g < n_group; ++g)
    begin[static_cast<size_t>(g) + 1] =
        begin[static_cast<size_t>(g)] + partition.group_slots[static_cast<size_t>(g)];
  for (int32_t l = 0; l < n_layer; ++l) {
    const auto g = static_cast<size_t>(partition.layer_group[static_cast<size_t>(l)]);
    group_begin_[static_cast<size_t>(l)] = begin[g];
    group_end_[static_cast<size_t>(l)] = begin[g + 1];
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

int32_t ExpertCache::access(int32_t layer, int32_t expert, uint64_t now) {
  const int32_t slot = find(layer, expert);
  if (slot < 0) {
    ++c_.misses;
    return -1;
  }
  ++c_.hits;
  const auto s = static_cast<size_t>(slot);
  freq_[s] = score(slot, now) + 1.0;
  last_[s] = now;
  return slot;
}

int32_t ExpertCache::victim(int32_t layer, uint64_t now) const {
  int32_t best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  uint64_t best_last = std::numeric_limits<uint64_t>::max();
  const auto [begin, end] = slots_of_layer(layer);
  for (int32_t slot = begin; slot < end; ++slot) {
    const auto s = static_cast<size_t>(slot);
    if (pins_[s] > 0 || state_[s] == SlotState::loading) continue;
    if (state_[s] == SlotState::empty) return slot;
    // LRU: oldest last use. LRFU: lowest decayed score, ties to the oldest.
    const double sc = policy_ == EvictionPolicy::lru ? 0.0 : score(slot, now);
    if (sc < best_score || (sc == best_score && last_[s] < best_last)) {
      best = slot;
      best_score = sc;
      best_last = last_[s];
    }
  }
  return best;
}

int32_t ExpertCache::insert(int32_t layer, int32_t expert, uint64_t now) {
  if (layer < 0 || layer >= n_layer_ || expert < 0 || expert >= n_expert_)
    fail(ErrorKind::internal, "expert cache: insert of layer {} expert {} (cache of {} × {})",
         layer, expert, n_layer_, n_expert_);
  if (find(layer, expert) >= 0)
    fail(ErrorKind::internal, "expert cache: layer {} expert {} inserted twice", layer, expert);
  const int32_t slot = victim(layer, now);
  if (slot < 0) return -1;
  const auto s = static_cast<size_t>(slot);
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
  ++c_.inserts;
  return slot;
}

void ExpertCache::mark_ready(int32_t slot) {
  if (key_[static_cast<size_t>(slot)] < 0)
    fail(ErrorKind::internal, "expert cache: slot {} is empty", slot);
  state_[static_cast<size_t>(slot)] = SlotState::ready;
  ++version_;
}

void ExpertCache::clear(int32_t slot) {
  const auto s = static_cast<size_t>(slot);
  if (pins_[s] > 0) fail(ErrorKind::internal, "expert cache: clearing pinned slot {}", slot);
  if (key_[s] >= 0) where_[static_cast<size_t>(key_[s])] = -1;
  key_[s] = -1;
  state_[s] = SlotState::empty;
  freq_[s] = 0.0;
  ++version_;
}

void ExpertCache::pin(int32_t slot) {
  ++pins_[static_cast<size_t>(slot)];
}

void ExpertCache::unpin(int32_t slot) {
  if (pins_[static_cast<size_t>(slot)] <= 0)
    fail(ErrorKind::internal, "expert cache: unpin of unpinned slot {}", slot);
  --pins_[static_cast<size_t>(slot)];
}

std::pair<int32_t, int32_t> ExpertCache::slots_of_layer(int32_t layer) const {
  return {group_begin_[static_cast<size_t>(layer)], group_end_[static_cast<size_t>(layer)]};
}

int32_t ExpertCache::resident_in_layer(int32_t layer) const {
  int32_t n = 0;
  const auto [begin, end] = slots_of_layer(layer);
  for (int32_t slot = begin; slot < end; ++slot)
    if (state_[static_cast<size_t>(slot)] == SlotState::ready && layer_of(slot) == layer) ++n;
  return n;
}

}  // namespace ferry
