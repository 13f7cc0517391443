#pragma once
// `--expert-types`: per-layer (and per-projection) types of the routed experts, overriding the
// quant mix's, to make files shaped like the mixed quantizations published models use (APEX:
// Q6_K / Q5_K / IQ4_XS experts by layer; Unsloth UD: Q5_K downs with Q4_K gate/up).
//
//   SPEC   = RULE ("," RULE)*
//   RULE   = [LAYERS ":"] [PROJ "="] TYPE
//   LAYERS = "*" | N | N "-" M           (inclusive; a rule without LAYERS takes the layers of the
//                                         rule before it, the first one all layers)
//   PROJ   = "gate_up" | "down"          (omitted: all three matrices)
//   TYPE   = a ggml type synth writes, lower case (encode.hpp): f32, f16, bf16, q4_0, q4_1, q5_0,
//            q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, mxfp4, iq4_nl, iq4_xs
//
// Later rules override earlier ones. gate and up always share a type (the CUDA expert kernels
// read both with one type): "gate=" or "up=" alone is refused.
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/core/types.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {

struct LayerExpertTypes {
  std::optional<GgmlType> gate_up, down;  // nullopt: the quant mix's type
};

// (n_layer) the types a spec gives each layer. ErrorKind::invalid_arg, naming the rule and the
// problem, for malformed rules, unknown or unsupported types, gate/up split and layers out of
// range.
std::vector<LayerExpertTypes> parse_expert_types(std::string_view spec, uint32_t n_layer);

// Sets the types of the ffn_{gate,up,down}_exps tensors. ErrorKind::invalid_arg when a type's
// block does not divide a tensor's rows (named).
void apply_expert_types(std::vector<TensorPlan>& tensors,
                        const std::vector<LayerExpertTypes>& types);

}  // namespace ferry::synth
