#pragma once
// Quantizing whole models fast without changing a bit: the K-quant reference quantizers
// (cpu::quantize_row_ref, = ggml's quantize_row_*_ref) spend nearly all their time in independent
// per-sub-block scale searches, each a fixed sequence of scalar float operations. Here the 8
// sub-blocks of a Q4_K/Q5_K super-block (or 8 of the 16 of a Q6_K one) run in the 8 lanes of AVX2
// vectors, each lane performing exactly the scalar operations in the scalar order (no FMA, no
// reassociation), so the output bytes equal the reference's. ~8x faster; this is what lets synth
// write a 30B-parameter Q4_K_M model in minutes on two cores. Without AVX2 (or with
// FERRY_ISA=scalar) it calls the reference.
#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::synth {

// dst ← n_rows rows of row_len values of type t (any type cpu::quantize_row_ref supports).
void quantize_rows(GgmlType t, const float* src, void* dst, int64_t n_rows, int64_t row_len);

// Whether quantize_rows uses the lane-parallel path for t on this machine (for tests).
bool quantize_rows_is_fast(GgmlType t);

}  // namespace ferry::synth
