#pragma once
// Ferry's own metrics, read from the offload engine's counters: the one adapter between the
// server and the engine's counter API (the rest of the server sees only OffloadMetrics).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine/engine.hpp"

namespace ferry::server {

struct OffloadMetrics {
  bool counted = false;     // counters exist (an offload executor, or --stats)
  bool offloading = false;  // an offload executor runs the experts (VRAM figures valid)
  std::vector<uint64_t> layer_hits, layer_misses;  // (n_layer) expert uses served from VRAM / not
  uint64_t hits = 0, misses = 0, cpu_experts = 0;
  uint64_t h2d_bytes = 0;  // every host→device byte (demand, prefetch, streaming)
  uint64_t tokens = 0;     // tokens the MoE layers processed
  uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0;
  std::array<double, 3> wait_seconds{};           // by cause, wait_cause_names order
  std::array<const char*, 3> wait_cause_names{};  // copy, cpu_expert, sync
  uint64_t vram_used_bytes = 0, vram_peak_bytes = 0, vram_budget_bytes = 0;
  int32_t cache_slots = 0;  // expert slots in VRAM
};

// Must run on the thread that runs the model (the executor's own stats are not thread-safe).
OffloadMetrics read_offload_metrics(LoadedModel& m);

}  // namespace ferry::server
