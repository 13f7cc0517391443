#pragma once
// The offload engine's options (built by runtime/engine/moe_setup.cpp from the flags) and its
// counters (--offload-stats; --stats reads them through snapshot_of).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offload/cost_model.hpp"
#include "offload/decide.hpp"
#include "offload/expert_cache.hpp"
#include "offload/host_store.hpp"
#include "offload/placement.hpp"
#include "offload/prefetcher.hpp"
#include "runtime/moe/stats.hpp"
#include "runtime/moe/trace.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {

struct OffloadOptions {
  Plan plan;
  std::string gguf_path;
  // (n_layer) absolute file offsets of ffn_gate_exps, ffn_up_exps, ffn_down_exps (uring/mmap load).
  std::vector<std::array<uint64_t, 3>> file_offsets;
  HostLoad host_load = HostLoad::alias;
  EvictionPolicy policy = EvictionPolicy::lrfu;
  ColdMode cold = ColdMode::auto_;
  std::optional<HardwareRates> rates;  // nullopt: calibrate at start-up
  int32_t prefetch_in_flight = 8;
  // Decode misses computed on the CPU are copied into a slot in the background (Prefetcher::admit).
  bool admit = true;
  ExpertPredictor* predictor = nullptr;  // not owned; may be null
  // The run's counters sink (not owned); null: the executor makes its own (tests).
  StatsCounters* counters = nullptr;
  // Charge the plan's dense/KV/state/workspace to the device as reservations, so the pool's
  // accounting covers the whole budget (sim: the forward's own buffers live elsewhere).
  bool reserve_fixed = true;
  StoreProgress progress;
  // --trace (not owned; may be null): "h2d" spans of every expert copy on a track per copy stream
  // (timed on the stream by host_fn markers), "wait" spans where the host blocks on a copy, and
  // "experts" spans of the step's expert compute with where each expert came from.
  Tracer* tracer = nullptr;
  // The step buffers are allocated for this many tokens at start (larger steps grow them); the
  // plan leaves device_step_bytes for them.
  int64_t max_batch = 512;
  // Decode steps from device tables, without a host synchronisation (--offload-decode
  // table; on sim the same tables and log, the CPU forward waiting for each step — for hit rates
  // and link bytes: sim "kernels" read the mapped store at CPU speed, the link is not modelled).
  // Per layer a device table of n_expert expert pointers, each at the expert's slot when a ready
  // slot holds it and at its mapped pinned host copy otherwise; a one-token step runs the grouped
  // kernels on the router's device ids over that table (misses are read in place over the link, as
  // ColdMode::mapped) and logs the ids, so the step can be recorded as a CUDA graph. begin_step()
  // reads the previous step's log (hits, misses, recency; misses are admitted behind) and rewrites
  // the table entries that changed; the plan leaves decode_table_bytes. Prefill steps stay
  // host-routed. No CPU experts and no predictor prefetch in decode (both need the routing on the
  // host). Needs a host store the device can map (uring). Observers get the routing from the log,
  // one step late (table_decode.hpp).
  bool decode_table = false;
};

// The executor's summary (--offload-stats): a view taken by OffloadExecutor::stats() of the run's
// one counters sink (StatsCounters, runtime/moe/stats.hpp: every counted field below) and of the
// engine's state (cache, memory, rates, store, slots). Nothing is counted here.
struct OffloadStats {
  uint64_t steps = 0, tokens = 0;  // tokens: counters
  uint64_t uses = 0;               // (step, distinct expert) pairs: counters (hit + miss)
  uint64_t hits = 0;               // ready slot: counters
  uint64_t inflight = 0;           // prefetch still in flight when needed
  uint64_t waited = 0;             // ... and waited for
  uint64_t misses = 0;             // not in the cache: counters (miss − inflight)
  uint64_t cpu_experts = 0;        // counters
  uint64_t copy_now = 0, streamed = 0;
  uint64_t mapped = 0;        // decode misses read in place from mapped host memory
  uint64_t mapped_bytes = 0;  // ... their weight bytes (read over the link, not copied)
  // decode_table: tokens decoded from the device tables (their uses, hits and mapped reads are
  // counted from the routing log before the next step), and table entries rewritten.
  uint64_t table_tokens = 0, table_updates = 0;
  uint64_t h2d_bytes = 0;   // demand and streaming copies (prefetch bytes: prefetch.bytes): counters
  uint64_t init_bytes = 0;  // the initial hot set
  double wait_ms = 0;       // host time blocked on copies (demand, prefetch waits): counters
  double cpu_ms = 0, compute_ms = 0;
  std::vector<uint64_t> layer_uses, layer_hits;  // (n_layer): counters
  // Time the compute stream sat idle, by cause (WaitCause order: copy, cpu_expert, sync), from
  // the counters. copy: host waits on demand copies and prefetches before the step's kernels
  // could be queued; cpu_expert: from the end of the step's device kernels to the upload of the
  // CPU experts' outputs (events); sync: from the routing reaching the host (cuda: its copy) to
  // the step's first enqueue, less the copy waits. Prefill streaming: its device time (events)
  // and bytes.
  double device_wait_ms[3] = {0, 0, 0};
  double stream_gpu_ms = 0;
  uint64_t stream_bytes = 0;
  PrefetchCounters prefetch;
  CacheCounters cache;
  MemoryStats memory;
  HardwareRates rates;
  HostStoreStats store;
  int32_t n_slots = 0;
};
// The --offload-stats lines.
std::string offload_stats_text(const OffloadStats& s);

}  // namespace ferry
