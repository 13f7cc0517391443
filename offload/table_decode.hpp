#pragma once
// Decode from device tables (--offload-decode table; docs/decisions/0004-offload-engine.md): a
// one-token MoE step with no host synchronisation, so the whole token can be one CUDA graph.
//
// Per layer a device table of n_expert expert pointer triples: a cached expert points at its ready
// VRAM slot, every other expert at its mapped pinned host copy (read in place over the link). A
// step runs the grouped expert kernels on the router's device ids over the layer's table and logs
// the routing (RoutingLog). Before the next step the executor reads the log — counts hits and
// misses, updates recency, admits misses, and reports the routing to the observers — and sync()
// rewrites the entries whose expert moved, on the compute stream before any later kernel.
//
// Slot safety: an entry points at a slot only while the slot is ready; a slot about to be refilled
// is no longer ready, so its entries point back at host memory before the refill, and the refill
// waits for every kernel queued before it (the executor records compute_done at end_step).
//
// A step computes per-slot outputs and one ordered weighted sum, as every offload step does
// (device_step.hpp): on the sim device it is bit-identical to the CPU executor.
//
// Device memory: tables (n_layer · n_expert · 24 bytes), the per-slot outputs and the routing log
// (device_bytes()).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "offload/device_experts.hpp"
#include "offload/expert_cache.hpp"
#include "runtime/moe/routing_log.hpp"

namespace ferry {

class TableDecoder {
 public:
  // mapped: the experts as the device reads them in place (the mapped host store), per layer.
  TableDecoder(Device& dev, Stream& compute, DeviceExpertKernels& kernels,
               std::vector<ExpertShape> shapes, const std::vector<MoeLayerWeights>& mapped,
               int32_t top_k);
  // Device memory the tables take (the routing log grows with the steps and is charged then).
  static uint64_t device_bytes(int32_t n_layer, int32_t n_expert, int32_t top_k, int64_t n_embd);

  // The layer's kernels from its table on the step's device routing, and the routing logged.
  void run(const MoeStep& s);
  // Routing of the last table step: `use(layer, expert)` for every (layer, slot) pair in layer
  // order, and the step's routing reported to `observers` (may be null). Then nothing is pending.
  void read_log(const ObserverSet* observers,
                const std::function<void(int32_t layer, int32_t expert)>& use);
  // A table step is about to run: the log is ready for it, and the entries follow the cache.
  // Returns the number of entries rewritten.
  uint64_t begin_step(const ExpertCache& cache,
                      const std::function<ExpertPtrs(int32_t slot, int32_t layer)>& slot,
                      const ObserverSet* observers);
  // End of a table step: the log's copy to the host.
  void end_step() { log_.end_step(); }
  // A host-routed step may change slots: the next table step syncs first.
  void invalidate() { synced_ = false; }
  bool pending() const { return pending_; }

 private:
  uint64_t sync(const ExpertCache& cache, const std::function<ExpertPtrs(int32_t, int32_t)>& slot);
  Device& dev_;
  Stream& compute_;
  DeviceExpertKernels& kernels_;
  std::vector<ExpertShape> shapes_;  // (n_layer)
  int32_t n_expert_, top_k_;
  DeviceBuffer tables_dev_;  // (n_layer, n_expert) ExpertPtrs
  DeviceBuffer y_dev_;       // (top_k, n_embd) the step's per-slot outputs (one layer at a time)
  HostBuffer tables_host_;   // pinned: as last queued
  std::vector<ExpertPtrs> mapped_;  // (n_layer · n_expert) the in-place entries
  std::vector<ExpertPtrs> want_;    // (n_layer · n_expert) scratch of sync()
  std::unique_ptr<Event> tables_copied_;
  bool tables_pending_ = false, synced_ = false;
  uint64_t version_ = UINT64_MAX;  // ExpertCache::version() the tables were last synced with
  RoutingLog log_;
  ObserverSet log_sink_;  // what read_log hands the log to
  bool pending_ = false;  // a table step ran since the last read_log
};

}  // namespace ferry
