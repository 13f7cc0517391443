#include "runtime/server/offload_metrics.hpp"

#include "offload/offload_executor.hpp"
#include "runtime/moe/stats.hpp"

namespace ferry::server {

OffloadMetrics read_offload_metrics(LoadedModel& m) {
  OffloadMetrics out;
  for (int w = 0; w < kWaitCauses; ++w)
    out.wait_cause_names[static_cast<size_t>(w)] = wait_cause_name(static_cast<WaitCause>(w));
  MoeSetup& moe = m.moe();
  const StatsCounters* c = moe.counters();
  if (!c) return out;
  out.counted = true;
  const StatsSnapshot s = c->snapshot();
  for (const LayerCounts& l : s.layers) {
    out.layer_hits.push_back(l.hit);
    out.layer_misses.push_back(l.miss);
  }
  out.hits = s.total.hit;
  out.misses = s.total.miss;
  out.cpu_experts = s.total.cpu_expert;
  out.h2d_bytes = s.total.h2d_bytes;
  out.tokens = s.tokens;
  out.prefetch_issued = s.total.prefetch_issued;
  out.prefetch_used = s.total.prefetch_used;
  out.prefetch_wasted = s.total.prefetch_wasted;
  for (size_t w = 0; w < out.wait_seconds.size(); ++w)
    out.wait_seconds[w] = static_cast<double>(s.wait_ns[w]) / 1e9;
  out.vram_peak_bytes = s.vram_peak_bytes;
  if (OffloadExecutor* ex = moe.offload()) {
    const OffloadStats st = ex->stats();
    out.offloading = true;
    out.vram_used_bytes = st.memory.used_bytes;
    out.vram_peak_bytes = std::max(out.vram_peak_bytes, st.memory.peak_bytes);
    out.vram_budget_bytes = st.memory.budget_bytes == UINT64_MAX ? 0 : st.memory.budget_bytes;
    out.cache_slots = st.n_slots;
  }
  return out;
}

}  // namespace ferry::server
