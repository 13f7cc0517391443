#pragma once
// Where every routed expert is, and how it moves: the host store (every expert in host RAM, and
// the view of it the device can read in place when it is mapped), the plan's VRAM slots with
// their bookkeeping (ExpertCache: which expert a slot holds, pins, eviction), the two staging
// slots of prefill streaming, and the copies into them — demand copies (copy-now, staging) on
// their own stream, prefetches and admissions on the prefetcher's.
//
// Slot safety: a refill of a slot first waits for `compute_done` (the compute stream's last
// recorded event), so a slot that queued kernels may still read is never overwritten early.
//
// Device memory, in plan order, every allocation charged to the budget: the fixed part as
// reservations (sim: the forward's own buffers live elsewhere), the staging slots, the slots.
//
// The executor moves experts through a few verbs — look_up, pin/unpin, wait, fill, admit,
// prefetch, poll — and never reaches the cache or the prefetcher behind them; the cache is shown
// read-only (the decode tables mirror it, the report reads its counters).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/moe/cpu_experts.hpp"
#include "offload/offload_options.hpp"

namespace ferry {

class Residency {
 public:
  // layers: the experts as the model sees them (views into the GGUF mapping; the store replaces
  // them). compute_done: the event slot refills wait for (owned by the caller; outlives this).
  Residency(Device& dev, std::vector<MoeLayerWeights> layers, const OffloadOptions& o,
            const Event& compute_done);
  ~Residency();

  int32_t n_layer() const { return static_cast<int32_t>(layers_.size()); }
  const ExpertShape& shape(int32_t layer) const { return shapes_[static_cast<size_t>(layer)]; }
  const std::vector<ExpertShape>& shapes() const { return shapes_; }
  const MoeLayerWeights& host_layer(int32_t layer) const {
    return layers_[static_cast<size_t>(layer)];
  }
  const std::vector<MoeLayerWeights>& host_layers() const { return layers_; }
  ExpertPtrs host_ptrs(int32_t layer, int32_t expert) const {
    return expert_ptrs(host_layer(layer), expert);
  }
  ExpertPtrs slot_ptrs(int32_t slot, int32_t layer) const;
  ExpertPtrs staging_ptrs(size_t b, int32_t layer) const;  // staging slot b (0 or 1)
  // The host store as the device reads it in place; empty when it is not mapped.
  const std::vector<MoeLayerWeights>& mapped() const { return mapped_; }

  const ExpertCache& cache() const { return *cache_; }
  const HostStoreStats& store_stats() const { return store_->stats(); }
  // Where the prefetcher counts (the run's counters sink).
  void set_counters(StatsCounters* c) { prefetcher_->set_counters(c); }

  // --- The placement's verbs.
  struct Lookup {
    int32_t slot = -1;  // the slot holding or receiving the expert; -1: none
    Residence where = Residence::absent;
    double copy_age_us = 0;  // in_flight: since its copy was issued
  };
  // (layer, expert) at the cache tick `now`; a use (the cache's recency and frequency count it).
  Lookup look_up(int32_t layer, int32_t expert, uint64_t now);
  // Whether a ready slot holds the expert, without counting a use (a decode step's present
  // experts are pinned before any miss may evict them).
  bool ready(int32_t layer, int32_t expert) const;
  // A ready slot taken for a step: a prefetch's first use is counted, the slot pinned until
  // unpin (after the step's kernels). Returns its device pointers.
  ExpertPtrs pin(int32_t slot, int32_t layer);
  void unpin(int32_t slot) { cache_->unpin(slot); }
  // Blocks until the copy into `slot` (a prefetch in flight) has landed.
  void wait(int32_t slot) { prefetcher_->wait(slot); }
  // Copy-now: a slot for (layer, expert), filled on the demand stream and pinned; -1 when no slot
  // can be evicted. waited_ms: the host's wait for the copy.
  int32_t fill(int32_t layer, int32_t expert, uint64_t now, double& waited_ms);
  // Admission: (layer, expert), just computed elsewhere, copied into a slot in the background
  // (dropped when copies are busy or nothing can be evicted).
  void admit(int32_t layer, int32_t expert, uint64_t now) { prefetcher_->admit(layer, expert, now); }
  // A table decode step's use of (layer, expert): true when a ready slot held it (a prefetch's
  // first use is counted); false when it was read in place (absent: found_slot false).
  bool use_in_place(int32_t layer, int32_t expert, uint64_t now, bool& found_slot);
  // Predictions for the layers after current_layer: queued, the best issued (stale ones dropped).
  void prefetch(const std::vector<PredictedExpert>& p, int32_t current_layer, uint64_t now);
  // Completed copies become ready slots.
  void poll() { prefetcher_->poll(); }
  uint64_t init_bytes() const { return init_bytes_; }

  // Enqueues the copies that fill `slot` with (layer, expert) on `s`, after compute_done.
  void fill_slot(int32_t slot, int32_t layer, int32_t expert, Stream& s);
  // Copy-now: fills `slot` on the demand stream and waits for it; returns the host's wait (ms).
  double fill_now(int32_t slot, int32_t layer, int32_t expert);
  // Copies a streamed expert from the host store into staging slot b on the demand stream, after
  // the kernels that last read it (staging_free(b)), and records staging_done(b).
  void stage(int32_t layer, int32_t expert, size_t b);
  Event& staging_done(size_t b) { return *staging_done_[b]; }
  Event& staging_free(size_t b) { return *staging_free_[b]; }
  Stream& demand() { return *demand_; }

 private:
  // issue() enqueues a copy of `bytes` on s; with a tracer, brackets it with host_fn markers that
  // record an "h2d" span on s's track.
  void traced_copy(Stream& s, int32_t layer, int32_t expert, uint64_t bytes,
                   const std::function<void()>& issue);
  int32_t track_of(const Stream& s);

  Device& dev_;
  const OffloadOptions& o_;
  const Event& compute_done_;
  std::vector<MoeLayerWeights> layers_;  // (n_layer) views into the host store
  std::vector<ExpertShape> shapes_;      // (n_layer)
  std::unique_ptr<HostStore> store_;
  std::vector<MoeLayerWeights> mapped_;  // (n_layer) or empty
  std::vector<DeviceBuffer> reserved_;   // dense/KV/state/workspace reservations
  DeviceBuffer slots_, staging_;
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::unique_ptr<Stream> demand_;  // copy-now and prefill streaming
  std::unique_ptr<Event> demand_done_;
  std::array<std::unique_ptr<Event>, 2> staging_done_, staging_free_;
  std::vector<const Stream*> tracks_;  // --trace: copy streams seen, track = kTrackBase + index
  uint64_t init_bytes_ = 0;
};

}  // namespace ferry
