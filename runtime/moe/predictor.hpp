#pragma once
// Routing prediction for prefetch: which experts will layers L+1..L+depth use for this token?
//
// Predictors (each measured on its own, per target layer):
//   router d   cross-layer: layer L+d's router (ffn_gate_inp) applied to layer L's MoE input x,
//              softmax, the n most probable experts (d = 1..depth). Real routers see the residual
//              stream after L+1..L+d-1's attention; x of layer L is its best available stand-in.
//   prev       same-layer temporal: the experts layer L+d used for the previous token.
//   freq       the n experts with the largest decayed use count at layer L+d (decay per token).
//   emitted    what predict() hands to the prefetcher: for each target layer, the union of
//              router top-n and prev, scored p_router + 0.5·[in prev] (prev-token experts are
//              usually still cached, so adding them costs little and the score orders the copies).
// Quality: for a prediction set P and the actual choice A (top_k ids) of the same token,
// precision = |P ∩ A| / |P|, recall = |P ∩ A| / |A|, summed over tokens before dividing.
// Predictions are scored when the target layer's request arrives with the same number of tokens
// (decode: one; prefill batches: row by row); others are dropped uncounted.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/moe/step.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

// What a predictor hands to the offload engine's prefetcher (offload/prefetcher.hpp).
struct PredictedExpert {
  int32_t layer = 0;
  int32_t expert = 0;
  float score = 0.0f;  // higher = more likely; used as the priority
};

class ExpertPredictor {
 public:
  virtual ~ExpertPredictor() = default;
  // Called with the MoE input of `layer` (x: (n_tokens, n_embd) normalized hidden state) and the
  // experts it routed to (ids: (n_tokens, top_k)). Appends experts later layers are likely to use.
  virtual void predict(int32_t layer, const float* x, int32_t n_tokens, const int32_t* ids,
                       int32_t top_k, std::vector<PredictedExpert>& out) = 0;
};


struct PredictorOptions {
  int32_t depth = 2;           // router predictions for layers L+1..L+depth
  int32_t n_candidates = 0;    // experts per router/freq prediction; 0 = top_k
  float freq_decay = 0.95f;    // per token
  float prev_bonus = 0.5f;     // score added to prev-token experts in the emitted set
};

// Counts of one predictor at one target layer.
struct PredictionCount {
  uint64_t tokens = 0, predicted = 0, actual = 0, hit = 0;
  double precision() const { return predicted ? double(hit) / double(predicted) : 0.0; }
  double recall() const { return actual ? double(hit) / double(actual) : 0.0; }
  void add(const PredictionCount& o) {
    tokens += o.tokens;
    predicted += o.predicted;
    actual += o.actual;
    hit += o.hit;
  }
};

struct PredictionQuality {
  int32_t depth = 0;
  // [layer] of each predictor; router[d-1][layer] for distance d.
  std::vector<std::vector<PredictionCount>> router;
  std::vector<PredictionCount> prev, freq, emitted;
};

// Per-layer precision/recall table (and the all-layer totals) for --stats.
std::string prediction_table(const PredictionQuality& q);

class RouterPredictor final : public ExpertPredictor {
 public:
  // routers: (n_expert, n_embd) per MoE layer, host memory (may be empty: only prev/freq then).
  RouterPredictor(std::vector<WeightView> routers, int32_t n_layer, int32_t n_expert, int32_t top_k,
                  PredictorOptions o = {});

  // ExpertPredictor: x (n_tokens, n_embd), ids (n_tokens, top_k) are layer's MoE input and actual
  // choice. Scores the pending predictions for `layer`, updates its history, then appends the
  // emitted predictions for later layers (deduplicated per (layer, expert), best score kept).
  void predict(int32_t layer, const float* x, int32_t n_tokens, const int32_t* ids, int32_t top_k,
               std::vector<PredictedExpert>& out) override;

  // Ranked (best first) router candidates for `target` from one row x (n_embd floats).
  std::vector<PredictedExpert> cross_layer(int32_t target, const float* x, int32_t n_embd) const;
  PredictionQuality quality() const;
  void reset_quality();
  int32_t n_candidates() const { return n_; }

 private:
  struct Pending {
    int32_t n_tokens = 0;
    std::vector<int32_t> ids;  // (n_tokens, width) candidate ids, -1 = none
    int32_t width = 0;
  };
  void score(Pending& p, int32_t layer, const int32_t* ids, int32_t n_tokens, PredictionCount& c);

  std::vector<WeightView> routers_;
  int32_t n_layer_, n_expert_, top_k_, n_;
  PredictorOptions o_;
  mutable std::mutex mu_;
  std::vector<std::vector<Pending>> pending_router_;  // [layer][d-1]
  std::vector<Pending> pending_emitted_;              // [layer]
  std::vector<std::vector<int32_t>> prev_;            // [layer] (top_k) last token's ids, empty: none
  std::vector<std::vector<float>> freq_;              // [layer] (n_expert) decayed counts
  PredictionQuality q_;
  std::vector<float> logits_;                         // (n_tokens, n_expert) scratch
};

}  // namespace ferry
