#pragma once
// qwen3moe (Qwen3-30B-A3B): pre-norm transformer; attention with per-head RMSNorm of q and k,
// NEOX RoPE, GQA; MoE feed-forward with softmax → top-k → renormalised routing, no shared expert.
#include <memory>

#include "runtime/model/model.hpp"

namespace ferry {

// state_footprint() for qwen3moe: the state built on `ops`.
StateFootprint qwen3moe_state_footprint(Ops& ops, const ModelConfig& c, const StateOptions& o);
std::unique_ptr<Model> make_qwen3moe(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                     const MoeExecutorFactory& moe, const LoadProgress& progress);

}  // namespace ferry
