#pragma once
// The object behind the observability flags of run / chat / logits / perplexity (registered with
// the other run flags: run_args.hpp): it holds the --trace tracer, installs the op-trace hook and
// prints the --stats tables at the end. The engine builds the routing override and the observers
// from the typed options (runtime/engine/moe_setup.hpp).
#include <memory>
#include <string>

#include "runtime/engine/engine.hpp"
#include "runtime/moe/stats.hpp"
#include "runtime/moe/trace.hpp"

namespace ferry::cli {

class Observability {
 public:
  explicit Observability(ObserveSettings a);
  ~Observability();
  const ObserveSettings& settings() const { return a_; }
  Tracer* tracer() { return tracer_.get(); }  // null without --trace
  // After loading: installs the op-trace hook (--trace). `dump`: a hook to keep calling, if any.
  void attach(LoadedModel& m, DebugHook dump = {});
  // End of the run: settles the MoE executor, writes the trace, prints the stats tables to stderr.
  // ErrorKind::io when a file cannot be written.
  void finish();

 private:
  ObserveSettings a_;
  std::unique_ptr<Tracer> tracer_;
  LoadedModel* model_ = nullptr;
  bool finished_ = false;
};

// The run's options with the session it must hold and the tracer of `obs`.
RunOptions run_options(const RunOptions& base, Observability& obs, const SessionOptions& session);

}  // namespace ferry::cli
