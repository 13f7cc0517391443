#pragma once
// The observability and routing flags of run / chat / logits, and the object that implements them
// around a loaded model (docs/routing.md):
//   --routing model|uniform|locality|trace:FILE   replace the router's choice (benchmarks)
//   --routing-seed N                              seed of uniform/locality routing
//   --record-routing FILE                         write the run's routing (FRRT trace)
//   --stats                                       routing statistics + prediction quality (+ offload
//                                                 counters when an offload executor fills them)
//   --trace FILE                                  Chrome/Perfetto JSON of ops and MoE steps
// Chain of executors (outermost first): routing → tracing → predictor tap → the engine's executor,
// so everything after the routing override sees the ids actually used.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "offload/offload_executor.hpp"
#include "offload/predictor.hpp"
#include "offload/routing.hpp"
#include "offload/stats.hpp"
#include "offload/stats_routing.hpp"
#include "offload/trace.hpp"
#include "runtime/engine/engine.hpp"

namespace ferry::cli {

struct ObserveArgs {
  std::string routing = "model";
  uint64_t routing_seed = 1;
  std::string record_routing;
  bool stats = false;
  int32_t predict_depth = 2;
  std::string trace;
};

void add_observe_args(CLI::App& app, ObserveArgs& a);

class Observability {
 public:
  // ErrorKind::invalid_arg for a bad --routing.
  explicit Observability(ObserveArgs a);
  ~Observability();
  bool wraps() const;  // whether wrap() adds anything
  // For LoadedModel::load: builds the chain around the engine's executor (reads the config and
  // the router matrices from the GGUF).
  MoeExecutorWrap wrap();
  // After loading: installs the op-trace hook (--trace). `dump`: a hook to keep calling, if any.
  void attach(LoadedModel& m, DebugHook dump = {});
  // End of the run: renames the recorded routing into place, writes the trace, prints the stats
  // tables to stderr. ErrorKind::io when a file cannot be written.
  void finish();
  // For other components (the offload executor): null when the flag is off. The tracer exists from
  // construction; the counters and predictor once wrap() has run.
  Tracer* tracer() { return tracer_.get(); }
  StatsCounters* counters() { return counters_.get(); }
  RouterPredictor* predictor() { return predictor_.get(); }

 private:
  ObserveArgs a_;
  RoutingSpec spec_;
  RoutingExecutor* routing_ = nullptr;  // owned by the model's executor chain
  std::unique_ptr<RouterPredictor> predictor_;
  std::unique_ptr<RoutingLocalityStats> locality_;
  std::unique_ptr<StatsCounters> counters_;
  std::unique_ptr<Tracer> tracer_;
  OffloadExecutor* offload_ = nullptr;  // the wrapped executor when it is the offload one
  bool finished_ = false;
};

// The offload executor's counters in the --stats table's terms: per-layer hits and misses; the
// totals carry CPU experts, prefetch (wasted bytes = wasted × the average issued copy), H2D bytes
// (demand + prefetch), host time blocked on copies as "copy" wait and CPU-expert time as
// "cpu_expert" wait (what a GPU would wait for when that work is not overlapped), VRAM peak.
StatsSnapshot snapshot_of(const OffloadStats& s);

}  // namespace ferry::cli
