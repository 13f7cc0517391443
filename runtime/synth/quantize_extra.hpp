#pragma once
// ggml's quantizers as ggml_quantize_chunk runs them without an imatrix (what llama-quantize writes
// by default): quantize_row_{q4_0,q4_1,q5_0,q5_1}_ref (kernels/cpu's quantize_row_ref),
// quantize_row_mxfp4_ref, and quantize_iq4_nl / quantize_iq4_xs (quantize_row_iq4_nl_impl with 7 scale tries; note that
// ggml's quantize_row_iq4_nl_ref tries none and is not what llama-quantize uses). Same float
// operations in the same order, no FMA: the bytes equal llama.cpp's (tests/oracle/
// test_quant_llamacpp.py). Block layouts are ggml's (ggml-common.h), written byte by byte.
//
// MXFP4's shared exponent is floor(log2f(amax)) - 2 as ggml computes it, through the C library's
// log2f: on another libm the exponent of a block whose largest value lies within a few ulps below a
// power of two could differ.
#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::synth {

// Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, IQ4_NL, IQ4_XS.
bool quantize_extra_supports(GgmlType t);

// dst ← n_rows rows of row_len values (whole blocks) of type t. IQ4_NL / IQ4_XS run their scale
// searches in AVX2 lanes where available (quantize_extra_is_fast); the bytes are the same.
void quantize_extra_rows(GgmlType t, const float* src, void* dst, int64_t n_rows, int64_t row_len);
bool quantize_extra_is_fast(GgmlType t);

// The scalar port alone, n values (whole blocks): what the lanes are tested against.
void quantize_extra_row_ref(GgmlType t, const float* src, void* dst, int64_t n);

namespace iq4 {
constexpr int kNlBytes = 18;   // IQ4_NL: d (fp16), qs[16] — 32 values
constexpr int kXsBytes = 136;  // IQ4_XS: d (fp16), scales_h (u16), scales_l[4], qs[128] — 256 values
// One block / super-block, scalar.
void quantize_nl_block(const float* x, uint8_t* y);
void quantize_xs_block(const float* x, uint8_t* y);
// 8 consecutive IQ4_NL blocks / one IQ4_XS super-block, the 8 block searches in the 8 lanes of AVX2
// vectors. Only call when quantize_extra_is_fast.
void quantize_nl_8_blocks_avx2(const float* x, uint8_t* y);
void quantize_xs_block_avx2(const float* x, uint8_t* y);
}  // namespace iq4

}  // namespace ferry::synth
