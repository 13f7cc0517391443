#pragma once
// Routing overrides for benchmarks: replace the router's top-k choice in every MoE step by a
// synthetic or recorded one, without changing the model or the executor (RoutingExecutor wraps any
// MoeExecutor and rewrites the ids/weights of each step; it is the one decorator of an executor —
// recording and statistics are observers). See docs/routing.md.
//
//   model        the model's own choice (pass-through; with --record-routing it is recorded)
//   uniform      k distinct experts drawn uniformly per token and layer (seeded)
//   locality     LocalityRouting: a seeded per-layer process with Qwen3-30B-A3B-like statistics
//   locality:FILE  the same process with per-layer targets measured on a routing trace
//   trace:FILE   replays a routing trace (routing_trace.hpp), per layer token by token
//
// Weights of a replaced choice: the model's softmax probabilities of the chosen ids, renormalised
// to sum 1 (as llama.cpp's routing does for its own top-k), computed from the request's x with the
// layer's router matrix. Without router matrices (or for a request whose layer has none) the
// model's own top-k weights are reassigned in rank order to the new ids instead — as on a GPU
// backend (RoutingOptions::device_ops), whose steps carry device routing: x is never brought to
// the host for this, the new ids are uploaded and the router's weights stay as they are.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/moe/step.hpp"
#include "runtime/moe/routing_trace.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

enum class RoutingMode { model, uniform, locality, trace };

struct RoutingSpec {
  RoutingMode mode = RoutingMode::model;
  std::string trace_path;     // trace:FILE
  std::string locality_path;  // locality:FILE (a routing trace whose statistics set the targets)
  uint64_t seed = 1;
};

// "model" | "uniform" | "locality" | "locality:FILE" | "trace:FILE"; ErrorKind::invalid_arg
// otherwise.
RoutingSpec parse_routing_spec(const std::string& s, uint64_t seed = 1);
const char* routing_mode_name(RoutingMode m);

// A deterministic 64-bit generator (xoshiro256**) with portable conversions: the standard
// distributions are implementation-defined, and generated routing must be the same everywhere.
class RoutingRng {
 public:
  explicit RoutingRng(uint64_t seed);
  uint64_t next();
  double uniform();                 // [0, 1)
  uint32_t below(uint32_t n);       // [0, n), n > 0

 private:
  uint64_t s_[4];
};

// Parameters of the locality process (docs/routing.md explains each and how they were tuned).
struct LocalityParams {
  double target_repeat_next = 0.45;   // share of a token's experts also used by the previous token
  double target_recur_window = 0.80;  // share also used by one of the previous `window` tokens
  int32_t window = 8;
  // Popularity of expert with rank r (random per-layer permutation): ∝ exp(-skew_lambda · r / E).
  // 4.8 makes the more popular half of the experts carry ~90% of the selections.
  double skew_lambda = 4.8;
  double gain = 0.02;                 // step of the feedback that steers the reuse probabilities
  double initial_p_prev = 0.40, initial_p_window = 0.25;
};

// One layer's locality process: per token, each of the k slots reuses an expert of the previous
// token with probability p_prev, one of the older tokens in the window with probability p_window,
// or draws fresh from the skewed popularity; p_prev and p_window follow the measured per-token
// statistics towards the targets by a small proportional feedback, so the targets hold for any
// (n_expert, top_k) rather than for one tuned shape.
class LocalityRouting {
 public:
  LocalityRouting(int32_t n_expert, int32_t top_k, uint64_t seed, const LocalityParams& p = {});
  void next(int32_t* ids);  // writes the next token's top_k distinct ids
  double p_prev() const { return p_prev_; }
  double p_window() const { return p_window_; }

 private:
  int32_t draw_fresh();
  int32_t n_expert_, top_k_;
  LocalityParams par_;
  RoutingRng rng_;
  std::vector<double> cdf_;                  // (n_expert) popularity, cumulative
  int64_t t_ = 0;
  double p_prev_, p_window_;
  std::vector<int32_t> last_use_;            // (n_expert) token index of the last use, -1: never
};

// The skew λ whose popularity ∝ exp(−λ·r/E) over E ranks puts `share` of the weight on the more
// popular half (0 when share is at or below the uniform half's).
double skew_for_top_half(double share, int32_t n_expert);

// Per-layer locality parameters for a model of (n_layer, n_expert, top_k) from a recorded trace:
// model layer l takes trace layer l·n_layer_trace / n_layer (the same relative depth); that layer's
// measured repeat-next and recur-in-8 become the targets, and λ is calibrated on a short run of the
// process itself so that the generated top-half share matches the measured one (reuse flattens the
// realised counts, see docs/routing.md). ErrorKind::invalid_arg when a trace layer holds fewer than
// 64 tokens.
std::vector<LocalityParams> locality_params_from_trace(const RoutingTrace& trace, int32_t n_layer,
                                                       int32_t n_expert, int32_t top_k);

// Softmax of one row of router logits, as ggml: exp summed in double, scaled by float(1/sum).
void routing_softmax(const float* logits, int32_t n, float* probs);

struct RoutingOptions {
  RoutingSpec spec;  // not model: that needs no override
  // Router matrices per MoE layer: (n_expert, n_embd), host memory; may be empty.
  std::vector<WeightView> routers;
  int32_t n_layer = 0, n_expert = 0, top_k = 0;
  // A GPU backend: its steps carry device routing; the override's ids are uploaded through these
  // ops (recorded into a step graph like the forward's own inputs) and the router's device weights
  // go with them in rank order. Null: host routing (the CPU backend, the sim device).
  Ops* device_ops = nullptr;
};

class RoutingExecutor final : public MoeExecutor {
 public:
  // ErrorKind::invalid_arg when a trace's shape (layers, experts, top_k) disagrees with the model's.
  RoutingExecutor(std::unique_ptr<MoeExecutor> inner, RoutingOptions o);
  ~RoutingExecutor() override;
  void run(const MoeStep& step) override;
  bool capturable() const override { return o_.device_ops && inner_->capturable(); }
  // The override's ids go up through the Ops (to_device), which a replay stages as recorded.
  bool replayable() const override { return o_.device_ops && inner_->replayable(); }
  void begin_step(int64_t n_tokens) override;
  void end_step(int64_t n_tokens) override { inner_->end_step(n_tokens); }
  void drain() override { inner_->drain(); }
  // The executor behind reports the routing it computed (the override's).
  void set_observers(const ObserverSet* o) override { inner_->set_observers(o); }

 private:
  void choose(const MoeStep& req);
  void weights_from_router(const MoeStep& req);
  std::unique_ptr<MoeExecutor> inner_;
  RoutingOptions o_;
  std::mutex mu_;  // requests are sequential per model; the lock makes concurrent misuse safe
  std::vector<RoutingRng> uniform_rng_;                  // [layer]
  std::vector<std::unique_ptr<LocalityRouting>> locality_;  // [layer]
  std::optional<RoutingTrace> trace_;
  std::vector<int64_t> trace_pos_;                       // [layer] next token to replay
  bool warned_wrap_ = false;
  std::vector<int32_t> ids_;    // (n_tokens, top_k)
  std::vector<float> weights_;  // (n_tokens, top_k)
  std::vector<float> probs_;    // (n_tokens, n_expert)
  DeviceBuffer ids_dev_;        // device routing: the override's ids, (n_tokens, top_k)
  // Per layer, the ids chosen in forward step `step` (begin_step counts them; 0: not counted).
  struct Chosen {
    uint64_t step = 0;
    std::vector<int32_t> ids;
  };
  std::vector<Chosen> chosen_;
  uint64_t step_ = 0;
};

}  // namespace ferry
