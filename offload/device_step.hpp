#pragma once
// One host-routed MoE step of the offload engine on its device — the one flow of the sim device
// and CUDA. The executor has resolved every distinct expert of the step (decide.hpp) to a source:
//   slot / mapped  its pointers go into the step's table; one grouped launch computes them all
//   stream         prefill: copied through a staging slot, computed over its own (token, slot)
//                  pairs when the copy has landed (copy i+2 waits for the kernels that read copy i)
//   cpu            computed on the host while the device works (cpu_experts.hpp)
// Every path writes per-slot outputs y (n_tokens, top_k, n_embd), unweighted; then ONE weighted
// sum adds them in slot order (runtime/moe/group.hpp). On the sim device the kernels are the CPU
// executor's code, so the step is bit-identical to MoeCpuExecutor whatever path each expert
// took; on CUDA the same enqueues run as kernels and copies, and the host never waits for them.
//
// A decode step (one token, k ≤ DecodeSlots::kMaxSlots) copies nothing: its slots and its CPU
// rows' indices go by value in the launches, so it never queues on the copy engine behind the copy
// stream's admissions (docs/decisions/0004).
// Buffers (device unless noted), sized for max_batch tokens at start and grown for larger steps:
//   step (device and pinned host alike): table (n_table ExpertPtrs) | local ids (n·k int32, -1
//     where not in the table) | streamed pairs (≤ n·k int32, each expert's back to back) | CPU
//     row indices (≤ n·k int32)
//   y: (n, k, n_embd) float — the per-slot outputs
//   cpu rows (pinned host, read by the scatter kernel in place): (n, k, n_embd) float, the CPU
//     experts' rows compacted to the front
// Events: compute_done (refills of slots wait for it), the staging slots' done/free (Residency),
// and the idle-time probes read back one step later (collect_waits).
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "offload/device_experts.hpp"
#include "runtime/moe/group.hpp"
#include "offload/residency.hpp"

namespace ferry {

// Where one distinct expert of a step comes from.
struct Resolved {
  int32_t expert = -1;
  ExpertPtrs w;             // slot, mapped host or host store addresses
  int32_t pinned_slot = -1;  // unpinned after the step
  bool stream = false;       // prefill: through the staging slots
  bool mapped = false;       // the device kernels read w (mapped host addresses) in place
};

// A host-routed step as the executor planned it on the host — where each distinct expert comes
// from — and what the device step's idle-time accounting needs. DeviceStep executes it.
struct StepPlan {
  std::vector<Resolved> experts;  // one per distinct expert of the step, in expert order
  // When the routing reached the host (0: it was there); the compute stream's idle time until
  // the step's first enqueue counts as sync, less the host's copy waits since copy_wait0_ns
  // (the counters' wait_ns(copy) when the step began).
  int64_t routing_ready_ns = 0;
  uint64_t copy_wait0_ns = 0;
};

class DeviceStep {
 public:
  DeviceStep(Device& dev, Stream& compute, DeviceExpertKernels& kernels, Residency& res,
             const OffloadOptions& o, Event& compute_done);
  // Device memory of the step buffers for steps of up to max_batch tokens (the plan leaves it).
  static uint64_t device_bytes(int64_t max_batch, const ExpertShape& s, int32_t top_k,
                               int32_t n_expert);

  // Executes `plan`. host: the step with x and the routing in host memory; dev: the same step in
  // device memory (sim: the same pointers). c: the run's counters sink.
  void run(const StepPlan& plan, const MoeStep& host, const MoeStep& dev, StatsCounters& c,
           Tracer* tracer);
  // The compute stream's idle time measured by the last step's events (cpu_expert) and the
  // streaming time; call once those events have completed.
  void collect_waits(StatsCounters& c);
  // The expert kernels on one token of layer 0's shape over `entries` (device-readable
  // pointers), timed with events: a warm-up on entries[0], then the best of one launch per further
  // entry, as weight bytes per second (0 when it cannot be measured).
  double time_kernels(const ExpertShape& s, const std::vector<ExpertPtrs>& entries);

 private:
  void grow(DeviceBuffer& b, size_t bytes, const char* tag);
  void grow(HostBuffer& b, size_t bytes);
  // The CPU experts' per-slot rows, computed into cpu_rows_ and compacted there; their
  // (token, slot) indices into row_idx. groups: the step's pairs grouped by expert.
  int64_t cpu_part(const MoeStep& host, const std::vector<Resolved>& cpu,
                   const ExpertGroups& groups, int32_t* row_idx, Tracer* tracer);

  Device& dev_;
  Stream& compute_;
  DeviceExpertKernels& kernels_;
  Residency& res_;
  const OffloadOptions& o_;
  Event& compute_done_;              // the executor records it after each step
  HostBuffer step_host_, cpu_rows_;  // pinned
  DeviceBuffer step_dev_, y_dev_;
  std::unique_ptr<Event> kernels_done_, cpu_ready_, stream_begin_, stream_end_;
  // Per-step scratch of run() and cpu_part(), cleared and refilled each step: no allocation per
  // MoE step once they have grown (they were ~10 small ones a step).
  std::vector<ExpertPtrs> table_, cpu_w_;
  std::vector<int32_t> index_;
  std::vector<Resolved> cpu_, streamed_;
  std::vector<int64_t> pair_start_;
  std::vector<uint8_t> on_cpu_, cpu_mask_;
  bool pending_cpu_wait_ = false, pending_stream_ = false;
};

}  // namespace ferry
