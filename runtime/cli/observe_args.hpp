#pragma once
// The observability and routing flags of run / chat / logits, and the object that implements them
// around a loaded model (docs/routing.md):
//   --routing model|uniform|locality[:FILE]|trace:FILE   replace the router's choice (benchmarks)
//   --routing-seed N                   seed of uniform/locality routing
//   --record-routing FILE              write the run's routing (FRRT trace)
//   --stats                            routing statistics + prediction quality (+ offload counters
//                                      when an offload executor fills them)
//   --trace FILE                       Chrome/Perfetto JSON of ops and MoE steps
// The engine builds the routing override and the observers from these (runtime/engine/moe_setup.hpp);
// this object holds the tracer, installs the op-trace hook and prints the tables at the end.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "offload/stats.hpp"
#include "offload/trace.hpp"
#include "runtime/engine/engine.hpp"

namespace ferry::cli {

using ObserveArgs = ObserveSettings;

void add_observe_args(CLI::App& app, ObserveArgs& a);

class Observability {
 public:
  // ErrorKind::invalid_arg for a bad --routing.
  explicit Observability(ObserveArgs a);
  ~Observability();
  const ObserveArgs& args() const { return a_; }
  Tracer* tracer() { return tracer_.get(); }  // null without --trace
  // After loading: installs the op-trace hook (--trace). `dump`: a hook to keep calling, if any.
  void attach(LoadedModel& m, DebugHook dump = {});
  // End of the run: settles the MoE executor, writes the trace, prints the stats tables to stderr.
  // ErrorKind::io when a file cannot be written.
  void finish();

 private:
  ObserveArgs a_;
  std::unique_ptr<Tracer> tracer_;
  LoadedModel* model_ = nullptr;
  bool finished_ = false;
};

// The MoE options of a run from its flags and session.
MoeOptions moe_options(const OffloadSettings& offload, Observability& obs, const SessionOptions& session);


}  // namespace ferry::cli
