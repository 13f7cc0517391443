#pragma once
// Per-tensor types of a file type, as llama.cpp produces them: convert_hf_to_gguf.py writes F32 for
// 1-D tensors, the router (ffn_gate_inp) and ssm_conv1d, F16 for the other weights; llama-quantize
// then picks each tensor's type from the file type's default with the adjustments of
// src/llama-quant.cpp (llama_tensor_get_type_impl) for the Q4_K_M / Q5_K_M / Q6_K / Q8_0 mixes,
// including its shape fallbacks. tests/oracle/test_quant_llamacpp.py checks this against
// llama_model_quantize on the same tensors.
#include <vector>

#include "runtime/synth/synth.hpp"

namespace ferry::synth {

// Would llama-quantize quantize this tensor at all (tensor_allows_quantization)?
bool llama_quantizes(const TensorPlan& t);

// Sets .type of every tensor (in file order, which must be layer order as llama.cpp's loader
// iterates it) for the mix (a row length that is not a multiple of 256 falls back as llama.cpp's
// does: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0). Throws ErrorKind::unsupported when the result
// is a type Ferry has no CPU kernels for.
void assign_types(std::vector<TensorPlan>& tensors, const Hparams& hp, QuantMix mix);

}  // namespace ferry::synth
