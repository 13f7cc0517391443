#include "runtime/cli/observe_args.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "offload/predictor.hpp"
#include "offload/routing.hpp"
#include "runtime/model/config.hpp"

namespace ferry::cli {

void add_observe_args(CLI::App& app, ObserveArgs& a) {
  app.add_option("--routing", a.routing,
                 "expert choice: model (the router's), uniform, locality (Qwen3-30B-A3B-like temporal "
                 "locality), locality:FILE (the same process with the per-layer statistics of a "
                 "--record-routing trace), or trace:FILE (replay --record-routing output); see docs/routing.md")
      ->capture_default_str();
  app.add_option("--routing-seed", a.routing_seed, "seed of --routing uniform|locality")->capture_default_str();
  app.add_option("--record-routing", a.record_routing, "write the routing of this run to FILE (FRRT format)");
  app.add_flag("--stats", a.stats,
               "print routing locality with a reuse-distance histogram, prediction precision/recall (depth: --prefetch, or 2) and offload counters at the end");
  app.add_option("--trace", a.trace, "write a Chrome/Perfetto trace (JSON) of ops, MoE steps and (offload) expert copies, waits and expert compute to FILE");
}

Observability::Observability(ObserveArgs a) : a_(std::move(a)) {
  (void)parse_routing_spec(a_.routing, a_.routing_seed);  // a bad --routing fails before loading
  if (!a_.trace.empty()) tracer_ = std::make_unique<Tracer>(a_.trace);
}

Observability::~Observability() = default;

MoeOptions moe_options(const OffloadSettings& offload, Observability& obs, const SessionOptions& session) {
  MoeOptions o;
  o.offload = offload;
  o.observe = obs.args();
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
                              routing_mode_name(parse_routing_spec(a_.routing, a_.routing_seed).mode));
  s += rs->locality().table();
  if (const RouterPredictor* p = moe.predictor()) s += prediction_table(p->quality());
  const StatsSnapshot snap = moe.counters()->snapshot();
  if (snap.total.hit + snap.total.miss > 0) s += stats_table(snap);
  else s += fmt::format("tokens {}; no offload counters (all experts computed by the resident executor)\n", snap.tokens);
  std::fputs(s.c_str(), stderr);
}


}  // namespace ferry::cli
