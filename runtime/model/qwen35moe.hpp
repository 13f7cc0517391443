#pragma once
// The hybrid Qwen MoE models: qwen35moe (Qwen3.5/3.6-35B-A3B) and qwen3next (Qwen3-Next-80B-A3B).
// Three of every four blocks mix tokens with a Gated DeltaNet (linear attention with a recurrent
// state), the fourth with gated full attention (per-head sigmoid gate on the output, q/k RMSNorm,
// NEOX RoPE on the first n_rot dims); every block ends in an MoE with a sigmoid-gated shared
// expert. See docs/qwen35moe.md for the graph and the differences between the two.
#include <memory>

#include "runtime/model/model.hpp"

namespace ferry {

// state_footprint() for the hybrid (DeltaNet + attention) architectures: the state built on `ops`.
StateFootprint hybrid_state_footprint(Ops& ops, const ModelConfig& c, const StateOptions& o);

std::unique_ptr<Model> make_qwen35moe(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                      const MoeExecutorFactory& moe, const LoadProgress& progress);
std::unique_ptr<Model> make_qwen3next(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                      const MoeExecutorFactory& moe, const LoadProgress& progress);

}  // namespace ferry
