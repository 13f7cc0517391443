#pragma once
// Prefetch: predicted experts copied ahead of use into evictable cache slots over a dedicated copy
// stream, with one event per slot so the executor can wait for exactly the expert it needs.
//
// Life of a prefetch: request() queues (layer, expert, priority); issue(current_layer) first drops
// stale requests (for layers the forward has already passed in this token, or already present),
// then, best priority first and while fewer than max_in_flight copies are outstanding, takes a
// slot from the cache (insert: state loading, pinned so nothing evicts it mid-copy), enqueues the
// copy and records the slot's event. poll() turns completed copies into ready slots (unpinned);
// wait(slot) blocks on one slot's event. A prefetched slot evicted before any use counts as
// wasted; its first use counts as used (precision = used / issued).
//
// Predictions come from an ExpertPredictor (runtime/moe/predictor.hpp; RouterPredictor implements it).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "offload/expert_cache.hpp"
#include "runtime/moe/predictor.hpp"
#include "runtime/moe/stats.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {

// The prefetch figures of a counters snapshot (prefetch_counters), for --offload-stats.
struct PrefetchCounters {
  uint64_t requested = 0, issued = 0, used = 0, wasted = 0, dropped_stale = 0, dropped_no_slot = 0;
  uint64_t admitted = 0, admit_dropped = 0;  // admissions (not predictions: outside precision)
  uint64_t bytes = 0;                        // prefetches and admissions
};

PrefetchCounters prefetch_counters(const StatsSnapshot& c);

class Prefetcher {
 public:
  // copy(slot, layer, expert, stream): enqueue the copies that fill `slot` on `stream`.
  using SlotCopy = std::function<void(int32_t slot, int32_t layer, int32_t expert, Stream& stream)>;
  // layer_expert_bytes: (n_layer) one expert's bytes per layer, for the byte counters.
  Prefetcher(Device& dev, ExpertCache& cache, SlotCopy copy,
             std::vector<uint64_t> layer_expert_bytes, int32_t max_in_flight);

  void request(const PredictedExpert& p);
  // Drops stale requests (layer ≤ current_layer) and issues the best ones. now: the cache tick.
  void issue(int32_t current_layer, uint64_t now);
  // Admission: copy an expert that was just computed elsewhere (a CPU miss) into a slot in the
  // background, so that its next use (temporal locality) hits. Issued at once, ahead of queued
  // predictions; dropped when max_in_flight copies are already outstanding or no slot is free.
  void admit(int32_t layer, int32_t expert, uint64_t now);
  void poll();              // completed copies → ready slots
  void wait(int32_t slot);  // blocks until slot's copy has landed (ready afterwards)
  bool in_flight(int32_t slot) const;
  // Microseconds since the copy into `slot` was issued (the cost model's remaining-time estimate
  // subtracts it from the copy's expected duration).
  double age_us(int32_t slot) const;
  // Executor hooks for the counters: a use of a slot, and a slot about to be reused.
  void note_use(int32_t slot);
  void note_evict(int32_t slot);
  Stream& stream() { return *stream_; }
  // The run's counters sink (runtime/moe/stats.hpp), where every prefetch figure is counted; until
  // set, a sink of the prefetcher's own.
  void set_counters(StatsCounters* c) { counters_ = c ? c : own_counters_.get(); }
  const StatsCounters& counters() const { return *counters_; }

 private:
  struct Slot {
    std::unique_ptr<Event> done;
    bool in_flight = false;
    bool unused = false;  // prefetched, not used yet
    int32_t layer = -1;   // of the last copy (for per-layer counters)
    double issued_at_us = 0;
  };
  // A landed copy's slot made ready and unpinned; complete() also takes it off in_flight_slots_
  // (poll() compacts the list itself).
  void settle(int32_t slot);
  void complete(int32_t slot);
  void track(int32_t slot);  // a copy into `slot` was just issued
  Device& dev_;
  ExpertCache& cache_;
  SlotCopy copy_;
  uint64_t expert_bytes(int32_t layer) const {
    return layer_expert_bytes_[static_cast<size_t>(layer)];
  }
  std::vector<uint64_t> layer_expert_bytes_;  // (n_layer)
  int32_t max_in_flight_;
  // The slots with a copy in flight, ascending (at most max_in_flight_): poll() runs once or twice
  // per MoE step and visits only these, in the slot order a scan of every slot would (a scan cost
  // O(n_slots) per step: ~5 us per step at 2191 slots,
  // bench/results/2026-12-05-offload-host-profile-devvm.md).
  std::vector<int32_t> in_flight_slots_;
  std::unique_ptr<Stream> stream_;
  std::vector<Slot> slots_;  // (n_slots)
  std::vector<PredictedExpert> queue_;
  std::unique_ptr<StatsCounters> own_counters_;
  StatsCounters* counters_ = nullptr;
};

}  // namespace ferry
