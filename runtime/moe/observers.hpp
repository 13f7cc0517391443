#pragma once
// The observers of the MoE step (runtime/moe/step.hpp: MoeObserver): each watches the routing an
// executor reports and keeps its own figures; none can change what an executor computes.
//   TraceObserver       --trace: one "moe" span per live step (layer, tokens)
//   RoutingStatsObserver --stats: routing locality, and the prediction quality of a predictor the
//                       executor does not already drive (the offload engine's prefetch predictor
//                       scores itself; there is one predictor per run)
//   ProfileRecorder     --record-profile: per-layer expert frequencies (placement_profile.hpp)
//   RoutingRecorder     --record-routing: the FRRT trace of every step (routing_trace.hpp)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/moe/step.hpp"
#include "runtime/moe/placement_profile.hpp"
#include "runtime/moe/predictor.hpp"
#include "runtime/moe/routing_trace.hpp"
#include "runtime/moe/stats.hpp"
#include "runtime/moe/stats_routing.hpp"
#include "runtime/moe/trace.hpp"

namespace ferry {

class TraceObserver final : public MoeObserver {
 public:
  explicit TraceObserver(Tracer& t) : t_(t) {}
  void on_routing(const RoutingView& r) override;
  void on_step_end(int32_t layer) override;

 private:
  Tracer& t_;
  int32_t layer_ = -1, n_tokens_ = 0;
  int64_t t0_ns_ = 0;
};

class RoutingStatsObserver final : public MoeObserver {
 public:
  // measure: a predictor only measured here (null when the executor drives the run's predictor).
  // tokens: counters whose token count this observer keeps (null when the executor keeps it).
  RoutingStatsObserver(int32_t n_layer, int32_t n_expert, RouterPredictor* measure,
                       StatsCounters* tokens);
  void on_routing(const RoutingView& r) override;
  bool wants_x() const override { return measure_ != nullptr; }
  const RoutingLocalityStats& locality() const { return locality_; }

 private:
  RoutingLocalityStats locality_;
  RouterPredictor* measure_;
  StatsCounters* tokens_;
  std::vector<PredictedExpert> out_;
};

class ProfileRecorder final : public MoeObserver {
 public:
  ProfileRecorder(int32_t n_layer, int32_t n_expert) : profile_(n_layer, n_expert) {}
  void on_routing(const RoutingView& r) override {
    profile_.add(r.layer, r.ids, r.n_tokens, r.top_k);
  }
  const ExpertProfile& profile() const { return profile_; }

 private:
  ExpertProfile profile_;
};

class RoutingRecorder final : public MoeObserver {
 public:
  RoutingRecorder(std::string path, const RoutingTraceHeader& h) : writer_(std::move(path), h) {}
  void on_routing(const RoutingView& r) override {
    writer_.append(r.layer, r.n_tokens, r.ids, r.weights);
  }
  // Renames the trace into place (ErrorKind::io on failure); once, at the end of a run.
  void finish();

 private:
  RoutingTraceWriter writer_;
};

}  // namespace ferry
