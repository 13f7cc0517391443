#pragma once
// Routed experts computed on the CPU from weights that may live anywhere the host can read: the
// GGUF mapping, the pinned host store, or a sim-device slot (the sim arena is host memory). Each
// expert gets its own three matrix pointers, so one call can mix resident and cold experts.
//
// Numerics are MoeCpuExecutor's by construction (the oracle for "same logits with and without a
// budget"): each expert is computed by a MoeCpuExecutor over a one-expert view of its pointers,
// with top_k 1 and weight 1 (y·1 is exact), on the same rows it would see inside the full step:
//   decode (1 token): one expert per call, its rows in the executor's decode blocks;
//   prefill: tokens grouped by expert in token order (counting sort, as the executor groups them),
//   so each expert's product has the same batch and the same row order.
// A weighted sum in slot order (as MoeCpuExecutor adds them) then gives bit-identical outputs
// whatever the pointers are, and follows the CPU executor when its kernels change.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/moe_table.hpp"
#include "runtime/moe/group.hpp"
#include "runtime/moe/step.hpp"

namespace ferry {


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
ExpertPtrs expert_ptrs(const MoeLayerWeights& L, int32_t e);

// A prefill batch prepared once per MoE step: quantized activations and the (token, slot) pairs
// grouped by expert. Experts are then computed one by one (in any order, from any thread) with
// compute_group; each writes only its own pairs' rows of y.
class ExpertBatch {
 public:
  ExpertBatch(const ExpertShape& s, const MoeStep& req, int32_t n_expert);
  int64_t group_size(int32_t e) const { return groups_.size(e); }
  // y: (n_tokens, top_k, n_embd); rows of the pairs routed to e are overwritten. Thread-safe for
  // distinct experts.
  void compute_group(int32_t e, const ExpertPtrs& w, float* y) const;

 private:
  ExpertShape s_;
  const float* x_ = nullptr;  // (n_tokens, n_embd)
  int32_t top_k_ = 0;
  ExpertGroups groups_;
};

// One expert over an explicit list of (token, slot) pairs, pairs[i] = t·top_k + s: y rows
// pairs[0..n) of (n_tokens, top_k, n_embd) = expert(x_t), computed as one batch of n rows in
// list order — what compute_group does for a group, so a list in token order holding the pairs
// the step routes to this expert gives the CPU executor's bits. Other rows untouched.
void compute_pairs(const ExpertShape& s, const ExpertPtrs& w, const float* x, int32_t top_k,
                   const int64_t* pairs, int64_t n, float* y);

// Decode: y (top_k, n_embd) for the slots s where compute[s] is true (others untouched).
// w[s] are the pointers of slot s's expert.
void compute_decode(const ExpertShape& s, const float* x, std::span<const ExpertPtrs> w,
                    std::span<const uint8_t> compute, float* y);


}  // namespace ferry
