#pragma once
// Routed experts computed on the CPU from weights that may live anywhere the host can read: the
// GGUF mapping, the pinned host store, or a sim-device slot (the sim arena is host memory). Each
// expert gets its own three matrix pointers, so one call can mix resident and cold experts.
//
// Numerics are exactly MoeCpuExecutor's (the oracle for "same logits with and without a budget"):
//   decode (1 token): x quantized once, gate/up/down as (slot × 64-row block) matvecs;
//   prefill: tokens grouped by expert in token order (counting sort), one small-batch product per
//   expert and matrix, so each token's rows see the same kernels and the same batch neighbours.
// A weighted sum in slot order then gives bit-identical outputs whatever the pointers are.
#include <cstdint>
#include <span>
#include <vector>

#include "offload/moe.hpp"

namespace ferry {

// One expert's matrices: gate, up (n_ff, n_embd) and down (n_embd, n_ff), each contiguous.
struct ExpertPtrs3 {
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
};

struct ExpertShape {
  GgmlType gate_type = GgmlType::F32, up_type = GgmlType::F32, down_type = GgmlType::F32;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  uint64_t gate_bytes() const;  // one expert's gate matrix
  uint64_t up_bytes() const;
  uint64_t down_bytes() const;
  uint64_t expert_bytes() const { return gate_bytes() + up_bytes() + down_bytes(); }
};

ExpertShape expert_shape(const MoeLayerWeights& L);
// The three matrices of expert e of a layer held as GGUF-style 3-D tensors.
ExpertPtrs3 expert_ptrs(const MoeLayerWeights& L, int32_t e);

// A prefill batch prepared once per MoE step: quantized activations and the (token, slot) pairs
// grouped by expert. Experts are then computed one by one (in any order, from any thread) with
// compute_group; each writes only its own pairs' rows of y.
class ExpertBatch {
 public:
  ExpertBatch(const ExpertShape& s, const MoeRequest& req, int32_t n_expert);
  int64_t group_size(int32_t e) const { return start_[e + 1] - start_[e]; }
  // y: (n_tokens, top_k, n_embd); rows of the pairs routed to e are overwritten.
  // parallel: let the matmuls use TBB (false inside an already parallel loop over experts).
  void compute_group(int32_t e, const ExpertPtrs3& w, float* y, bool parallel) const;

 private:
  ExpertShape s_;
  int32_t top_k_ = 0;
  bool shared_q_ = true;
  uint64_t gq_bytes_ = 0, uq_bytes_ = 0, hq_bytes_ = 0;
  std::vector<uint8_t> xq_gate_, xq_up_;  // (n_tokens) quantized rows
  std::vector<int64_t> start_;            // (n_expert + 1) group offsets into pairs_
  std::vector<int64_t> pairs_;            // flat t·top_k + s, grouped by expert
};

// Decode: y (top_k, n_embd) for the slots s where compute[s] is true (others untouched).
// w[s] are the pointers of slot s's expert.
void compute_decode(const ExpertShape& s, const float* x, std::span<const ExpertPtrs3> w,
                    std::span<const uint8_t> compute, float* y);

// out[t] = Σ_s y[t][s] · weights[t][s], slots added in order (as MoeCpuExecutor and llama.cpp).
void weighted_sum(const MoeRequest& req, const float* y);

}  // namespace ferry
