#pragma once
// Random valid blocks for the types synth has no quantizer for (Q2_K, Q3_K): every field is drawn
// from the row's random stream, within what ggml's dequantization accepts and with the fp16 scales
// chosen so that the dequantized values are zero-mean with standard deviation about `rms` (the
// tensor's init scale), as the generated F32 weights would be. The values do not follow the
// generated weights: no skew channel, no zero writer rows.
//
//   Q2_K (84 bytes: scales[16], qs[64], d, dmin): x = d·s·q − dmin·m per 16 values, q ∈ 0..3 from
//     random bits, s = m ∈ 8..15 random per 16 values, dmin = 1.5·d: x = d·s·(q − 1.5).
//   Q3_K (110 bytes: hmask[32], qs[64], scales[12], d): x = d·(s − 32)·q per 16 values, q uniform
//     in −3..3 (ggml's range is −4..3; −4 is left out so the mean is 0), s − 32 ∈ 8..31 random.
#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::synth {

bool is_random_block_type(GgmlType t);

// dst ← rows [row_begin, row_begin + n_rows) of row_len values (whole 256-value blocks) of type t,
// each row from its own stream RowRng(stream_seed, row): the bytes of a row depend only on
// (stream_seed, row).
void random_block_rows(GgmlType t, uint64_t stream_seed, uint64_t row_begin, uint64_t n_rows,
                       uint64_t row_len, float rms, uint8_t* dst);

}  // namespace ferry::synth
