#pragma once
// The VRAM expert cache's bookkeeping: which (layer, expert) each slot holds, its state, pins and
// the eviction policy. Memory and copies belong to the executor; this class is pure policy, so it
// is unit-tested on routing traces without a device.
//
// Slots are one pool shared by all layers by default (docs/decisions/0004-offload-engine.md gives
// the measurement): a per-layer split wastes slots on layers whose routing is concentrated while
// spread-out layers thrash. A SlotPartition splits the pool into groups of consecutive slots, each
// for the experts of some layers only: the plan's size classes (offload/placement.hpp), whose slots
// are exactly one size. Within a group the victim is chosen as in the pool.
//
// Policies:
//   lru  — evict the least recently used ready slot.
//   lrfu — frequency-decayed recency: each use adds 1 to a score that halves every `half_life`
//          ticks (one tick = one token); evict the lowest score. Old-but-popular experts survive a
//          burst of one-off uses that plain LRU would let them be pushed out by. The default
//          half-life (4 tokens) won a sweep on synthetic locality traces (tests/offload/
//          test_expert_cache.cpp prints it; numbers in docs/decisions/0004-offload-engine.md).
// A pinned slot (queued work reads it, or a copy into it is in flight) is never chosen.
//
// The victim is the first rule that applies, within the layer's group: the lowest-index empty
// slot; else, among ready unpinned slots, the lowest score (LRU: all equal; LRFU: freq·2^(−age/
// half_life)), ties to the oldest last use, then the lowest index. Loading and pinned slots are
// skipped. The choice is made without scanning the group (an insert runs on the engine's host
// thread for every miss, admission and prefetch; a scan of a 4000-slot class cost ~33 us): each
// group keeps an ordered set of its free slots and one of its ready unpinned slots (LRU: by
// last use; LRFU: by the key below), O(log n) per change. LRFU's scores all decay by the same factor, so
// their order only changes when a slot is used: a slot is ordered by the time-invariant
// key log2(freq) + last/half_life, and the few slots whose key is within rounding of the lowest
// are compared by their exact scores as computed by score() (details in expert_cache.cpp
// `lrfu_victim`); slots of equal frequency and last use (the initial uniform set, one token's
// admissions) score exactly alike, so only the first of such a run is scored.
// A slot re-enters the sets lazily: a hit takes it out (its key changed) and the pin that follows
// keeps it out, so it is queued and inserted once, with its final key, when the next insert needs
// a victim (a decode hit used to re-order its slot three times: access, pin, unpin). The sets are
// ordered by value, so when they are brought up to date does not change the victim.
// Ticks never go back (ErrorKind::internal otherwise): the order assumes every age is >= 0.
#include <compare>
#include <cstdint>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "offload/offload.hpp"

namespace ferry {


enum class SlotState : uint8_t { empty, loading, ready };

// Group g owns the next group_slots[g] slots (group 0 first); an expert of layer l goes only into
// a slot of group layer_group[l]. Empty: one pool of every slot for every layer.
struct SlotPartition {
  std::vector<int32_t> layer_group;  // (n_layer)
  std::vector<int32_t> group_slots;  // (n_group), sums to n_slots
};

struct CacheCounters {
  uint64_t hits = 0, misses = 0, evictions = 0, inserts = 0;
};

class ExpertCache {
 public:
  // ErrorKind::invalid_arg when a partition does not cover n_layer layers and n_slots slots.
  ExpertCache(int32_t n_slots, int32_t n_layer, int32_t n_expert, EvictionPolicy policy,
              const SlotPartition& partition = {}, double half_life_ticks = 4.0);
  // Not copyable: it keeps iterators into its own sets (a move keeps them valid).
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;
  ExpertCache(ExpertCache&&) = default;
  ExpertCache& operator=(ExpertCache&&) = default;

  int32_t n_slots() const { return static_cast<int32_t>(key_.size()); }
  // Slot holding (layer, expert), or -1. A loading slot counts as present (its copy is queued).
  int32_t find(int32_t layer, int32_t expert) const;
  SlotState state(int32_t slot) const { return state_[static_cast<size_t>(slot)]; }
  int32_t layer_of(int32_t slot) const;   // -1 when empty
  int32_t expert_of(int32_t slot) const;  // -1 when empty

  // A use of (layer, expert) at tick `now`: counts a hit when present and updates its score.
  // Returns the slot or -1 (a miss is counted).
  int32_t access(int32_t layer, int32_t expert, uint64_t now);
  // Takes a slot for (layer, expert) (state loading) in the layer's group: a free one, else the
  // policy's victim. Returns -1 when every candidate slot is pinned, or the group has no slots
  // (nothing is changed then). The new slot starts
  // with one use at `now` and is NOT pinned.
  int32_t insert(int32_t layer, int32_t expert, uint64_t now);
  void mark_ready(int32_t slot);
  // Forgets a slot's content (a failed or cancelled load).
  void clear(int32_t slot);

  void pin(int32_t slot);
  void unpin(int32_t slot);
  int32_t pins(int32_t slot) const { return pins_[static_cast<size_t>(slot)]; }

  // Changes whenever a slot's content or state changes (insert, mark_ready, clear); starts at 1.
  uint64_t version() const { return version_; }
  const CacheCounters& counters() const { return c_; }
  void reset_counters() { c_ = {}; }
  // The bookkeeping's own work since construction (its unit tests check what a change saves).
  struct Work {
    uint64_t listed = 0;  // ready slots inserted into the ordered sets
    uint64_t scored = 0;  // LRFU scores computed to choose victims
  };
  const Work& work() const { return work_; }
  int32_t resident_in_layer(int32_t layer) const;
  // Slots [begin, end) that may hold experts of `layer`.
  std::pair<int32_t, int32_t> slots_of_layer(int32_t layer) const;

 private:
  // The slots one group may choose from. A slot is in `free` when empty and unpinned, in the
  // policy's set (LRU `by_last`, LRFU `by_key`) when ready, unpinned and not queued in
  // `pending_`; loading and pinned slots are in none, which is how they are skipped without a
  // scan.
  using ByLast = std::set<std::pair<uint64_t, int32_t>>;  // (last use, slot): oldest first
  // Lowest score first; a run of equal (key, last, freq) is in slot order.
  struct KeyEntry {
    double key;
    uint64_t last;
    double freq;
    int32_t slot;
    auto operator<=>(const KeyEntry&) const = default;
  };
  using ByKey = std::set<KeyEntry>;
  struct Group {
    int32_t begin = 0, end = 0;  // its slots [begin, end)
    std::set<int32_t> free;      // lowest index first
    ByLast by_last;
    ByKey by_key;
  };

  double score(int32_t slot, uint64_t now) const;
  double lrfu_key(int32_t slot) const;
  int32_t victim(int32_t layer, uint64_t now);  // flushes the queue first
  int32_t lrfu_victim(const Group& g, uint64_t now);
  void check_tick(uint64_t now);
  // The group whose sets hold `slot` as its state and pins say, or nullptr (pinned or loading).
  Group* listing_group(int32_t slot);
  // Take a slot out of / put it into its group's sets as its state and pins say; every change of
  // state, pins, last use or frequency happens between the two.
  void unlist(int32_t slot);
  void list(int32_t slot);
  // Inserts the queued slots that are still ready and unpinned into their sets.
  void flush();

  EvictionPolicy policy_;
  int32_t n_layer_, n_expert_;
  double half_life_;
  uint64_t version_ = 1;
  std::vector<int32_t> key_;          // (n_slots) layer·n_expert + expert, -1 empty
  std::vector<SlotState> state_;      // (n_slots)
  std::vector<int32_t> pins_;         // (n_slots)
  std::vector<Group> groups_;         // (n_group)
  std::vector<int32_t> layer_group_;  // (n_layer) index into groups_
  std::vector<int32_t> slot_group_;   // (n_slots) index into groups_
  std::vector<uint64_t> last_;        // (n_slots) tick of the last use
  std::vector<double> freq_;          // (n_slots) decayed use count as of last_
  // (n_slots) where a listed ready slot sits in its group's by_last or by_key: a hit re-orders
  // its slot without a search, and reuses the node it took out (spare_*) instead of allocating.
  std::vector<ByLast::iterator> at_last_;
  std::vector<ByKey::iterator> at_key_;
  std::vector<ByLast::node_type> spare_last_;
  std::vector<ByKey::node_type> spare_key_;
  std::vector<uint8_t> in_sets_;      // (n_slots) a ready slot is in by_last or by_key
  std::vector<uint8_t> queued_;       // (n_slots) in pending_
  std::vector<int32_t> pending_;      // ready slots to list at the next flush (some stale)
  Work work_;
  double max_freq_ = 1.0;             // the largest freq_ ever held (bounds rounding near underflow)
  uint64_t latest_tick_ = 0;          // the latest `now` seen
  std::vector<int32_t> where_;        // (n_layer·n_expert) slot or -1
  CacheCounters c_;
};

}  // namespace ferry
