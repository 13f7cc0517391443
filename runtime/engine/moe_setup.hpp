#pragma once
// How a loaded model runs its MoE steps, built in one place from the run's typed options and plan
// (runtime/engine/run_options.hpp; the CLI only parses flags into them): the executor — the CPU
// executor, the resident CUDA executor, or the offload engine over a sim or CUDA device (through
// its factory, offload/offload.hpp) — the routing override in front of it (the one decorator),
// and the observers that watch the routing the executor reports (--stats, --trace,
// --record-profile, --record-routing, a benchmark's own).
//
// One predictor per run: with --prefetch N the offload engine drives a RouterPredictor of depth N
// and scores it as it goes; --stats prints that predictor's quality, or measures one of depth N
// (2 when nothing prefetches) on the observed routing.
//
// One counters sink per run (StatsCounters, runtime/moe/stats.hpp): made here whenever something
// counts (--stats, or the offload engine), handed to the offload engine, read by --stats,
// --offload-stats and the benchmarks.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/offload.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/engine/run_options.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/config.hpp"
#include "runtime/moe/observers.hpp"
#include "runtime/moe/step.hpp"

namespace ferry {

class MoeSetup {
 public:
  // Checks the options (ErrorKind::invalid_arg naming the flag) before anything is loaded.
  MoeSetup(RunOptions o, RunPlan plan);
  ~MoeSetup();
  bool offloading() const { return plan_.offload; }
  const RunOptions& options() const { return o_; }
  const RunPlan& plan() const { return plan_; }

  // Called once by the engine with the model's expert layers (views into the mapping), its GGUF
  // and backend ops (every dense weight resident by then).
  std::unique_ptr<MoeExecutor> build(const std::vector<MoeLayerWeights>& layers,
                                     const gguf::File& f, Ops& ops);

  // After a run: settles the executor (copies in flight, routing not yet reported), writes
  // --record-profile and --record-routing. Once; ErrorKind::io when a file cannot be written.
  void finish();

  OffloadExecutor* offload() { return offload_; }  // null unless the offload engine runs
  // The run's counters sink (null when nothing counts: no --stats and no offload engine).
  StatsCounters* counters() { return counters_.get(); }
  const RoutingStatsObserver* routing_stats() const { return stats_.get(); }
  const RouterPredictor* predictor() const { return predictor_.get(); }

 private:
  std::unique_ptr<MoeExecutor> build_offload(const std::vector<MoeLayerWeights>& layers,
                                             const gguf::File& f, const ModelConfig& c, Ops& ops);
  RunOptions o_;
  RunPlan plan_;
  ObserverSet observers_;
  std::unique_ptr<RouterPredictor> predictor_;
  std::unique_ptr<StatsCounters> counters_;
  std::unique_ptr<RoutingStatsObserver> stats_;
  std::unique_ptr<TraceObserver> trace_;
  std::unique_ptr<ProfileRecorder> profile_;
  std::unique_ptr<RoutingRecorder> recorder_;
  OffloadExecutor* offload_ = nullptr;  // owned by the model's executor
  MoeExecutor* executor_ = nullptr;     // the outermost one (owned by the model)
  bool finished_ = false;
};

// cuda: the backend scratch a model's shape needs beyond the CudaOps workspaces for steps of up to
// max_batch tokens (the chunked DeltaNet prefill's, when the ops use that form); 0 otherwise.
uint64_t cuda_extra_workspace_bytes(const Ops& ops, const ModelConfig& c, int64_t max_batch);

// The placement input of a model: dense bytes from the tensor table; KV cache, recurrent state and
// workspace for n_ctx / n_batch exactly as the session allocates them (state_footprint).
PlacementInput placement_input(const gguf::File& f, const ModelConfig& c, int64_t n_ctx,
                               GgmlType type_k, GgmlType type_v, int32_t n_batch,
                               uint64_t budget_bytes);

}  // namespace ferry
