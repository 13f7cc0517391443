#pragma once
// The run's one counters sink: every component (the offload executor, its prefetcher and device
// step, the routing observer of a resident run) counts here once; --stats prints its table,
// --offload-stats the executor's summary (OffloadStats, a view of a snapshot plus the engine's
// static figures), and the benchmarks and the server's metrics read the same snapshot.
// Thread-safe and cheap: relaxed atomics, each layer's counters on their own cache line so that a
// CPU-expert worker and the copy thread counting different layers do not contend. A snapshot is
// a plain copy (consistent per counter, not across counters — good enough for a report).
//
// Meaning of the per-layer counts (one per (MoE step, used expert) pair):
//   hit            the expert was resident in a VRAM slot when needed (including prefetched ones)
//   miss           it was not: served by a CPU expert, a copy-now, or a prefetch still in flight
//   cpu_expert     of the misses, those computed on the CPU
//   prefetch_*     copies started ahead of use (issued), first used (used), evicted or dropped
//                  unused (wasted); precision = used / issued, recall = used / (used + miss)
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

enum class WaitCause : int { copy = 0, cpu_expert = 1, sync = 2 };
inline constexpr int kWaitCauses = 3;
const char* wait_cause_name(WaitCause c);

// Whole-run events of the offload engine (no per-layer split), each counted once where it happens.
enum class Count : int {
  steps,                // host-routed or table MoE steps
  inflight,             // expert uses whose prefetch was still in flight (counted as misses too)
  waited,               // ... of which the host waited for the copy
  copy_now,             // misses copied into a slot on demand
  streamed,             // prefill experts streamed through the staging slots
  mapped,               // decode misses read in place from mapped host memory
  mapped_bytes,         // ... their weight bytes
  table_tokens,         // tokens decoded from the device tables
  table_updates,        // table entries rewritten
  init_bytes,           // the initial hot set's copies
  cpu_ns,               // host time computing CPU experts
  compute_ns,           // host time of the device steps (enqueue, CPU experts)
  stream_gpu_ns,        // device time of prefill streaming (events)
  stream_bytes,         // bytes streamed for prefill
  prefetch_requested,   // predictions handed to the prefetcher
  prefetch_dropped_stale,    // ... dropped: their layer had passed or the expert was present
  prefetch_dropped_no_slot,  // ... dropped: no evictable slot
  admitted,             // CPU-computed misses copied into a slot behind
  admit_dropped,        // ... not copied (copies in flight, no slot)
  prefetch_bytes,       // bytes of prefetches and admissions
  kCount
};
inline constexpr int kCounts = static_cast<int>(Count::kCount);
const char* count_name(Count c);

struct LayerCounts {
  uint64_t hit = 0, miss = 0, cpu_expert = 0;
  uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0;
  uint64_t prefetch_issued_bytes = 0, prefetch_wasted_bytes = 0;
  uint64_t h2d_bytes = 0;
};

struct StatsSnapshot {
  std::vector<LayerCounts> layers;  // (n_layer)
  LayerCounts total;
  uint64_t tokens = 0;
  std::array<uint64_t, kWaitCauses> wait_ns{};
  std::array<uint64_t, kCounts> counts{};
  uint64_t count(Count c) const { return counts[static_cast<size_t>(c)]; }
  uint64_t vram_peak_bytes = 0;
  double wall_ms = 0;  // since the counters were made or reset
};

class StatsCounters {
 public:
  explicit StatsCounters(int32_t n_layer);
  ~StatsCounters();
  StatsCounters(const StatsCounters&) = delete;
  StatsCounters& operator=(const StatsCounters&) = delete;

  int32_t n_layer() const { return n_layer_; }
  // Out-of-range layers are ignored (counting must never throw inside a hot path).
  void hit(int32_t layer, uint64_t n = 1) { add(layer, kHit, n); }
  void miss(int32_t layer, uint64_t n = 1) { add(layer, kMiss, n); }
  void cpu_expert(int32_t layer, uint64_t n = 1) { add(layer, kCpu, n); }
  void prefetch_issued(int32_t layer, uint64_t bytes) { add(layer, kPfIssued, 1), add(layer, kPfIssuedBytes, bytes); }
  void prefetch_used(int32_t layer) { add(layer, kPfUsed, 1); }
  void prefetch_wasted(int32_t layer, uint64_t bytes) { add(layer, kPfWasted, 1), add(layer, kPfWastedBytes, bytes); }
  // Every host→device byte (demand copies, prefetches, streaming); layer -1: not layer-specific.
  void h2d(int32_t layer, uint64_t bytes);
  void wait(WaitCause c, uint64_t ns) { wait_ns_[static_cast<size_t>(c)].fetch_add(ns, std::memory_order_relaxed); }
  uint64_t wait_ns(WaitCause c) const { return wait_ns_[static_cast<size_t>(c)].load(std::memory_order_relaxed); }
  void tokens(uint64_t n) { tokens_.fetch_add(n, std::memory_order_relaxed); }
  void add(Count c, uint64_t n = 1) { counts_[static_cast<size_t>(c)].fetch_add(n, std::memory_order_relaxed); }
  uint64_t count(Count c) const { return counts_[static_cast<size_t>(c)].load(std::memory_order_relaxed); }
  // Device memory in use now; keeps the maximum.
  void vram_in_use(uint64_t bytes);

  StatsSnapshot snapshot() const;
  void reset();

 private:
  enum Field { kHit, kMiss, kCpu, kPfIssued, kPfUsed, kPfWasted, kPfIssuedBytes, kPfWastedBytes, kH2d, kFields };
  struct alignas(64) Layer {
    std::array<std::atomic<uint64_t>, kFields> v{};
  };
  void add(int32_t layer, Field f, uint64_t n) {
    if (layer >= 0 && layer < n_layer_) layers_[static_cast<size_t>(layer)].v[f].fetch_add(n, std::memory_order_relaxed);
  }
  int32_t n_layer_;
  std::unique_ptr<Layer[]> layers_;  // (n_layer)
  std::atomic<uint64_t> h2d_other_{0}, tokens_{0}, vram_peak_{0};
  std::array<std::atomic<uint64_t>, kWaitCauses> wait_ns_{};
  std::array<std::atomic<uint64_t>, kCounts> counts_{};
  std::atomic<int64_t> t0_ns_{0};
};

// The --stats table: per layer hit rate, misses, CPU experts, prefetch precision/recall and
// wasted MiB; then per-token H2D bytes, GPU wait split by cause, VRAM peak.
std::string stats_table(const StatsSnapshot& s);

}  // namespace ferry
