#include "runtime/cli/observe_args.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/model/config.hpp"

namespace ferry::cli {

void add_observe_args(CLI::App& app, ObserveArgs& a) {
  app.add_option("--routing", a.routing,
                 "expert choice: model (the router's), uniform, locality (Qwen3-30B-A3B-like temporal "
                 "locality), or trace:FILE (replay --record-routing output); see docs/routing.md")
      ->capture_default_str();
  app.add_option("--routing-seed", a.routing_seed, "seed of --routing uniform|locality")->capture_default_str();
  app.add_option("--record-routing", a.record_routing, "write the routing of this run to FILE (FRRT format)");
  app.add_flag("--stats", a.stats, "print routing locality, prediction precision/recall and offload counters at the end");
  app.add_option("--predict-depth", a.predict_depth, "layers ahead the --stats predictor looks (router of L+1..L+d)")
      ->capture_default_str();
  app.add_option("--trace", a.trace, "write a Chrome/Perfetto trace (JSON) of ops, MoE steps and (offload) expert copies, waits and expert compute to FILE");
}

Observability::Observability(ObserveArgs a) : a_(std::move(a)), spec_(parse_routing_spec(a_.routing, a_.routing_seed)) {
  if (a_.predict_depth < 1 || a_.predict_depth > 16)
    fail(ErrorKind::invalid_arg, "--predict-depth {}: expected 1..16", a_.predict_depth);
  if (!a_.trace.empty()) tracer_ = std::make_unique<Tracer>(a_.trace);
}

Observability::~Observability() = default;

bool Observability::wraps() const {
  return spec_.mode != RoutingMode::model || !a_.record_routing.empty() || a_.stats || tracer_;
}

MoeExecutorWrap Observability::wrap() {
  if (!wraps()) return {};
  return [this](std::unique_ptr<MoeExecutor> inner, const gguf::File& f, Ops& ops) -> std::unique_ptr<MoeExecutor> {
    const ModelConfig c = read_config(f);
    // The routers (ffn_gate_inp, (n_expert, n_embd)) of every MoE layer, as views into the mapping.
    std::vector<WeightView> routers;
    for (int32_t l = 0; l < c.n_layer; ++l) {
      const gguf::TensorInfo* t = f.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", l));
      if (t && t->n_dims == 2 && t->ne[1] == static_cast<uint64_t>(c.n_expert))
        routers.push_back({f.data(*t), t->type, static_cast<int64_t>(t->ne[1]), static_cast<int64_t>(t->ne[0])});
      else
        routers.push_back({});
    }
    std::unique_ptr<MoeExecutor> e = std::move(inner);
    offload_ = dynamic_cast<OffloadExecutor*>(e.get());
    if (a_.stats) {
      PredictorOptions po;
      po.depth = a_.predict_depth;
      predictor_ = std::make_unique<RouterPredictor>(routers, c.n_layer, c.n_expert, c.n_expert_used, po);
      locality_ = std::make_unique<RoutingLocalityStats>(c.n_layer, c.n_expert);
      counters_ = std::make_unique<StatsCounters>(c.n_layer);
      e = std::make_unique<RequestTap>(std::move(e), [this, out = std::vector<PredictedExpert>()](const MoeRequest& r) mutable {
        out.clear();
        predictor_->predict(r.layer, r.x, r.n_tokens, r.expert_ids, r.top_k, out);
        locality_->observe(r.layer, r.expert_ids, r.n_tokens, r.top_k);
        if (r.layer == 0) counters_->tokens(static_cast<uint64_t>(r.n_tokens));
      });
    }
    if (tracer_) e = std::make_unique<TracingExecutor>(std::move(e), *tracer_);
    if (spec_.mode != RoutingMode::model || !a_.record_routing.empty()) {
      RoutingOptions o;
      o.spec = spec_;
      o.record_path = a_.record_routing;
      o.routers = routers;
      o.n_layer = c.n_layer;
      o.n_expert = c.n_expert;
      o.top_k = c.n_expert_used;
      // cuda: table decode takes the override without bringing the routing to the host.
      if (std::string_view(ops.name()) == "cuda") o.device_ops = &ops;
      auto r = std::make_unique<RoutingExecutor>(std::move(e), std::move(o));
      routing_ = r.get();
      e = std::move(r);
    }
    return e;
  };
}

void Observability::attach(LoadedModel& m, DebugHook dump) {
  if (!tracer_) return;
  tracer_->set_thread_name("main");
  m.model().set_debug_hook(trace_debug_hook(*tracer_, std::move(dump)));
}

void Observability::finish() {
  if (finished_) return;
  finished_ = true;
  if (routing_) routing_->finish();
  if (tracer_) {
    tracer_->write();
    std::fprintf(stderr, "ferry: trace: %zu events written to %s\n", tracer_->events(), tracer_->path().c_str());
  }
  if (a_.stats && locality_) {
    std::string s = fmt::format("\nferry stats (routing {}):\n", routing_mode_name(spec_.mode));
    s += locality_->table();
    s += prediction_table(predictor_->quality());
    StatsSnapshot snap = counters_->snapshot();
    // The offload executor feeds the counters itself once attached (Offload::attach); its own
    // totals are the fallback when nothing was fed.
    if (offload_ && snap.total.hit + snap.total.miss == 0) {
      const double wall_ms = snap.wall_ms;
      snap = snapshot_of(offload_->stats());
      snap.wall_ms = wall_ms;
    }
    if (snap.total.hit + snap.total.miss > 0) s += stats_table(snap);
    else s += fmt::format("tokens {}; no offload counters (all experts computed by the CPU executor)\n", snap.tokens);
    std::fputs(s.c_str(), stderr);
  }
}

StatsSnapshot snapshot_of(const OffloadStats& s) {
  StatsSnapshot r;
  const size_t L = std::min(s.layer_uses.size(), s.layer_hits.size());
  r.layers.resize(L);
  for (size_t l = 0; l < L; ++l) {
    r.layers[l].hit = s.layer_hits[l];
    r.layers[l].miss = s.layer_uses[l] - std::min(s.layer_uses[l], s.layer_hits[l]);
  }
  r.total.hit = s.hits;
  r.total.miss = s.uses - std::min(s.uses, s.hits);
  r.total.cpu_expert = s.cpu_experts;
  r.total.prefetch_issued = s.prefetch.issued;
  r.total.prefetch_used = s.prefetch.used;
  r.total.prefetch_wasted = s.prefetch.wasted;
  r.total.prefetch_issued_bytes = s.prefetch.bytes;
  r.total.prefetch_wasted_bytes = s.prefetch.issued ? s.prefetch.bytes / s.prefetch.issued * s.prefetch.wasted : 0;
  r.total.h2d_bytes = s.h2d_bytes + s.prefetch.bytes;
  r.tokens = s.tokens;
  r.wait_ns[static_cast<size_t>(WaitCause::copy)] = static_cast<uint64_t>(s.wait_ms * 1e6);
  // Exact flow: every CPU expert holds the step up. Device flow: only the time the device sat idle
  // for them, and for the host's synchronisation and decisions (measured by the executor).
  const auto cpu = static_cast<size_t>(WaitCause::cpu_expert), sync = static_cast<size_t>(WaitCause::sync);
  r.wait_ns[cpu] = static_cast<uint64_t>((s.device_flow ? s.device_wait_ms[cpu] : s.cpu_ms) * 1e6);
  if (s.device_flow) r.wait_ns[sync] = static_cast<uint64_t>(s.device_wait_ms[sync] * 1e6);
  r.vram_peak_bytes = s.memory.peak_bytes;
  return r;
}

}  // namespace ferry::cli
