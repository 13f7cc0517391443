#pragma once
// Per-tensor types of a file type, as llama.cpp produces them: convert_hf_to_gguf.py writes F32 for
// 1-D tensors, the router (ffn_gate_inp) and ssm_conv1d, F16 for the other weights; llama-quantize
// then picks each tensor's type from the file type's default with the adjustments of
// src/llama-quant.cpp (llama_tensor_get_type_impl) for every file type QuantMix names, including
// its shape fallbacks. tests/oracle/test_quant_llamacpp.py checks this against
// llama_model_quantize on the same tensors.
#include <vector>

#include "runtime/synth/synth.hpp"

namespace ferry::synth {

// Would llama-quantize quantize this tensor at all (tensor_allows_quantization)?
bool llama_quantizes(const TensorPlan& t);

// Sets .type of every tensor (in file order, which must be layer order as llama.cpp's loader
// iterates it) for the mix. Throws ErrorKind::unsupported, naming the tensor, when llama.cpp has
// no fallback for a row length or the result is a type synth cannot write (encode.hpp); with the
// file types QuantMix names neither happens (the last fallback is F16).
void assign_types(std::vector<TensorPlan>& tensors, const Hparams& hp, QuantMix mix);

}  // namespace ferry::synth
