#pragma once
// The offload MoE executor: an MoeExecutor over a Device whose memory holds only part of the
// routed experts (the plan's slots). It composes the pieces of the offload engine, each owning its
// own state:
//   Residency     where every expert is: host store, slots, cache, staging, prefetcher, copies
//   decide()      per expert: slot / wait / mapped / cpu / stream / copy-now (pure; decide.hpp)
//   DeviceStep    a host-routed step on the device: every source writes per-slot outputs, one
//                 ordered weighted sum (bit-identical to the CPU executor on the sim device)
//   TableDecoder  decode from device tables, no host synchronisation (--offload-decode table)
//   CostModel     calibrated at start-up or from a hardware profile
// Per host-routed step: the routing comes to the host (on cuda one copy and synchronisation; on
// sim its pointers are host memory), the executor reports it to its observers, resolves the
// step's present experts first (pinned), lets the predictor's guesses for later layers be
// prefetched, resolves the misses, and hands the step to DeviceStep. Slots pinned for the step
// are unpinned once compute_done (recorded after the step's kernels) covers them: a refill waits
// for it.
#include <cstdint>
#include <memory>
#include <vector>

#include "offload/device_step.hpp"
#include "runtime/moe/step.hpp"
#include "offload/offload_options.hpp"
#include "offload/residency.hpp"
#include "offload/table_decode.hpp"

namespace ferry {

// Device memory of the decode tables (n_layer · n_expert pointer triples) and the routing log.
inline uint64_t decode_table_bytes(int32_t n_layer, int32_t n_expert, int32_t top_k, int64_t n_embd) {
  return TableDecoder::device_bytes(n_layer, n_expert, top_k, n_embd);
}
// Device memory of the step buffers for steps of up to max_batch tokens.
inline uint64_t device_step_bytes(int64_t max_batch, const ExpertShape& s, int32_t top_k,
                                  int32_t n_expert) {
  return DeviceStep::device_bytes(max_batch, s, top_k, n_expert);
}

class OffloadExecutor final : public MoeExecutor {
 public:
  // The sim device (owned), its compute stream and the sim expert kernels made here.
  OffloadExecutor(std::unique_ptr<Device> device, std::vector<MoeLayerWeights> layers,
                  OffloadOptions options);
  // A device owned elsewhere (cuda: the CudaOps's device and a view of its stream, so the expert
  // kernels are ordered with the forward's own ops and share its budget).
  OffloadExecutor(Device& device, std::unique_ptr<Stream> compute,
                  std::unique_ptr<DeviceExpertKernels> kernels, std::vector<MoeLayerWeights> layers,
                  OffloadOptions options);
  ~OffloadExecutor() override;
  void run(const MoeStep& step) override;
  // decode_table: one-token steps run from the device tables on the forward's device routing and
  // can be recorded.
  bool capturable() const override { return o_.decode_table; }
  void begin_step(int64_t n_tokens) override;
  void end_step(int64_t n_tokens) override;
  // Counts the last table step's routing, waits for every copy in flight (prefetches included)
  // and settles their slots.
  void drain() override;

  // The report (--offload-stats): the counters sink's snapshot with the engine's state.
  OffloadStats stats() const;
  Device& device() { return *device_; }
  const ExpertCache& cache() const { return res_->cache(); }
  const Plan& plan() const { return o_.plan; }
  // The engine's one counters sink (--stats prints its table): per layer hits, misses, CPU
  // experts, prefetches, H2D bytes; waits by cause, tokens, device memory in use.
  StatsCounters& counters() { return *counters_; }

 private:
  void init(std::vector<MoeLayerWeights> layers);
  // n_tokens: the expert's tokens in this step (the cost model's batch); decode: a one-token step.
  Resolved resolve(int32_t layer, int32_t expert, int64_t n_tokens, bool decode);
  // The step with x and the routing in host memory: on cuda copied from the device (one
  // synchronisation; routing_ready_ns_ is when it arrived), on sim the step itself.
  MoeStep host_routing(const MoeStep& s);
  // A step whose routing is on the host (req: host copies; dev: the step's device pointers).
  void run_host_routed(const MoeStep& req, const MoeStep& dev);
  void predict_and_prefetch(const MoeStep& req);
  // decode_table: the last table step's routing — counters, recency, admissions, observers.
  void read_routing_log();
  void calibrate();

  OffloadOptions o_;
  std::unique_ptr<Device> owned_device_;
  Device* device_ = nullptr;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<DeviceExpertKernels> kernels_;
  std::unique_ptr<Event> compute_done_;  // after each step's kernels: slot refills wait for it
  std::unique_ptr<Residency> res_;
  std::unique_ptr<DeviceStep> step_;
  std::unique_ptr<TableDecoder> tables_;  // decode_table
  CostModel cost_;
  uint64_t tick_ = 0;  // forward steps: the cache's and prefetcher's clock
  std::vector<PredictedExpert> predicted_;
  // run_host_routed's per-step scratch, cleared and refilled each step (no allocation per MoE
  // step once they have grown).
  StepPlan plan_;
  std::vector<int64_t> count_;    // (n_expert) tokens per expert
  std::vector<int32_t> missing_;  // decode experts not ready in a slot
  StatsCounters* counters_ = nullptr;  // OffloadOptions::counters, or owned_counters_
  std::unique_ptr<StatsCounters> owned_counters_;
  HostBuffer routing_host_;       // cuda: the host copy of a step's x, ids and weights
  int64_t routing_ready_ns_ = 0;  // steady_clock ns when that copy arrived
};

}  // namespace ferry
