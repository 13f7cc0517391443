#include "runtime/cli/observe_args.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/moe/predictor.hpp"
#include "runtime/moe/routing.hpp"
#include "runtime/model/config.hpp"

namespace ferry::cli {

Observability::Observability(ObserveSettings a) : a_(std::move(a)) {
  if (!a_.trace.empty()) tracer_ = std::make_unique<Tracer>(a_.trace);
}

Observability::~Observability() = default;

RunOptions run_options(const RunOptions& base, Observability& obs, const SessionOptions& session) {
  RunOptions o = base;
  o.observe = obs.settings();
  o.n_ctx = session.n_ctx;
  o.type_k = session.type_k;
  o.type_v = session.type_v;
  o.n_batch = session.n_batch;
  o.tracer = obs.tracer();
  return o;
}

void Observability::attach(LoadedModel& m, DebugHook dump) {
  model_ = &m;
  if (!tracer_) {
    if (dump) m.model().set_debug_hook(std::move(dump));
    return;
  }
  tracer_->set_thread_name("main");
  m.model().set_debug_hook(trace_debug_hook(*tracer_, std::move(dump)));
}

void Observability::finish() {
  if (finished_) return;
  finished_ = true;
  if (model_) model_->moe().finish();
  if (tracer_) {
    tracer_->write();
    std::fprintf(stderr, "ferry: trace: %zu events written to %s\n", tracer_->events(), tracer_->path().c_str());
  }
  if (!a_.stats || !model_) return;
  MoeSetup& moe = model_->moe();
  const RoutingStatsObserver* rs = moe.routing_stats();
  if (!rs) return;
  std::string s = fmt::format("\nferry stats (routing {}):\n",
                              routing_mode_name(a_.routing.mode));
  s += rs->locality().table();
  if (const RouterPredictor* p = moe.predictor()) s += prediction_table(p->quality());
  const StatsSnapshot snap = moe.counters()->snapshot();
  if (snap.total.hit + snap.total.miss > 0) s += stats_table(snap);
  else s += fmt::format("tokens {}; no offload counters (all experts computed by the resident executor)\n", snap.tokens);
  std::fputs(s.c_str(), stderr);
}


}  // namespace ferry::cli
