#include "runtime/moe/observers.hpp"

#include "runtime/core/log.hpp"

namespace ferry {

void TraceObserver::on_routing(const RoutingView& r) {
  if (!r.live) return;  // read back from a device log: no timing of its own
  layer_ = r.layer;
  n_tokens_ = r.n_tokens;
  t0_ns_ = t_.now_ns();
}

void TraceObserver::on_step_end(int32_t layer) {
  if (layer != layer_) return;
  t_.complete("moe", "moe", t0_ns_, t_.now_ns() - t0_ns_,
              {{"layer", layer_}, {"tokens", n_tokens_}});
  layer_ = -1;
}

RoutingStatsObserver::RoutingStatsObserver(int32_t n_layer, int32_t n_expert,
                                           RouterPredictor* measure, StatsCounters* tokens)
    : locality_(n_layer, n_expert), measure_(measure), tokens_(tokens) {}

void RoutingStatsObserver::on_routing(const RoutingView& r) {
  // Without x on the host (a device routing log without it) the predictor has nothing to go on.
  if (measure_ && r.x) {
    out_.clear();
    measure_->predict(r.layer, r.x, r.n_tokens, r.ids, r.top_k, out_);
  }
  locality_.observe(r.layer, r.ids, r.n_tokens, r.top_k);
  if (tokens_ && r.layer == 0) tokens_->tokens(static_cast<uint64_t>(r.n_tokens));
}

void RoutingRecorder::finish() {
  writer_.finish();
  log::info("routing: recorded {} MoE steps to {}", writer_.records(), writer_.path());
}

}  // namespace ferry
