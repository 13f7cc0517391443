#pragma once
// How a loaded model runs its MoE steps, built in one place from options (the CLI only parses
// flags into them): the executor — the CPU executor, the resident CUDA executor, or the offload
// engine over a sim or CUDA device — the routing override in front of it (the one decorator),
// and the observers that watch the routing the executor reports (--stats, --trace,
// --record-profile, --record-routing, a benchmark's own).
//
// One predictor per run: with --prefetch N the offload engine drives a RouterPredictor of depth N
// and scores it as it goes; --stats prints that predictor's quality, or measures one of depth N
// (2 when nothing prefetches) on the observed routing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/moe/step.hpp"
#include "offload/observers.hpp"
#include "offload/offload_executor.hpp"
#include "offload/placement.hpp"
#include "offload/routing.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/config.hpp"

namespace ferry {

// The offload flags (docs/options.md): strings as given, checked by MoeSetup.
struct OffloadSettings {
  std::string device = "cpu";  // cpu | sim | cuda | auto
  std::string vram;            // budget ("": every expert resident)
  bool print_plan = false;
  std::string plan_json;
  std::string profile, record_profile;
  std::string host_load;  // "" = the device's default
  std::string cold = "auto";
  std::string evict = "lrfu";
  int32_t prefetch = 0;  // layers ahead; measured: prefetch displaced hot experts (bench/results)
  std::string sim_link = "13:10";
  std::string hw_profile;
  std::string decode = "host";
  bool stats = false;  // --offload-stats
};

// The routing and observability flags.
struct ObserveSettings {
  std::string routing = "model";
  uint64_t routing_seed = 1;
  std::string record_routing;
  bool stats = false;
  std::string trace;
};

struct MoeOptions {
  OffloadSettings offload;
  ObserveSettings observe;
  // The session the offload plan must hold (0 ctx: the model's default).
  int64_t n_ctx = 0;
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;
  int32_t n_batch = 512;
  Tracer* tracer = nullptr;             // --trace (not owned; may be null)
  std::vector<MoeObserver*> observers;  // more observers (not owned), e.g. a benchmark's
};

class MoeSetup {
 public:
  // Checks the flags (ErrorKind::invalid_arg naming the flag) before anything is loaded.
  explicit MoeSetup(MoeOptions o);
  ~MoeSetup();
  // --device sim, or cuda with a budget or a plan/profile flag: the offload engine runs the experts
  // (the backend then uploads none of them).
  bool offloading() const;
  const MoeOptions& options() const { return o_; }

  // Called once by the engine with the model's expert layers (views into the mapping), its GGUF
  // and backend ops (every dense weight resident by then).
  std::unique_ptr<MoeExecutor> build(const std::vector<MoeLayerWeights>& layers,
                                     const gguf::File& f, Ops& ops);

  // After a run: settles the executor (copies in flight, routing not yet reported), writes
  // --record-profile and --record-routing. Once; ErrorKind::io when a file cannot be written.
  void finish();

  OffloadExecutor* offload() { return offload_; }  // null unless offloading
  // --stats: the counters, locality statistics and the run's predictor (null without --stats).
  StatsCounters* counters() { return offload_ ? &offload_->counters() : counters_.get(); }
  const RoutingStatsObserver* routing_stats() const { return stats_.get(); }
  const RouterPredictor* predictor() const { return predictor_.get(); }

 private:
  bool planning() const;
  std::unique_ptr<MoeExecutor> build_offload(const std::vector<MoeLayerWeights>& layers,
                                             const gguf::File& f, const ModelConfig& c, Ops& ops);
  MoeOptions o_;
  RoutingSpec spec_;
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

// The placement input of a model: dense bytes from the tensor table; KV cache, recurrent state and
// workspace for n_ctx / n_batch exactly as the session allocates them (state_footprint).
PlacementInput placement_input(const gguf::File& f, const ModelConfig& c, int64_t n_ctx,
                               GgmlType type_k, GgmlType type_v, int32_t n_batch,
                               uint64_t budget_bytes);

}  // namespace ferry
