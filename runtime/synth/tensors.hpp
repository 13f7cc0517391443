#pragma once
// Internal to runtime/synth: the per-architecture tensor table (names, shapes, fill) and metadata.
#include <vector>

#include "runtime/synth/synth.hpp"
#include "runtime/synth/vocab.hpp"

namespace ferry::synth {

// Tensors in file order: token_embd, blk.0 … blk.N-1, output_norm, output. Types unset.
std::vector<TensorPlan> build_tensors(const Hparams& hp);

// GGUF metadata in the order and with the value types of the published Qwen GGUFs.
std::vector<std::pair<std::string, gguf::Value>> build_metadata(const Options& o, const Hparams& hp,
                                                                const Vocab& vocab);

}  // namespace ferry::synth
