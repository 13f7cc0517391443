#pragma once
// How synth turns a tensor's rows into its bytes: the one switch over the types it writes.
//
//   F32, F16, BF16                 the generated values, converted (round to nearest even)
//   Q8_0, Q4_K, Q5_K, Q6_K         cpu::quantize_row_ref (ggml's reference), the K-quants through
//                                  the AVX2 lanes of quantize_fast.hpp
//   Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, ggml's quantizers as llama-quantize runs them without an
//   IQ4_NL, IQ4_XS                 imatrix, ported to quantize_extra.hpp (same bytes)
//   Q2_K, Q3_K                     random valid blocks (random_blocks.hpp): no quantizer here
//                                  yet, so the values follow only the tensor's scale, not the
//                                  generated weights (no skew channel, no zero writer rows)
//
// Every type's bytes depend only on the plan (seed, tensor name, row), never on how rows are
// grouped into chunks or on the thread count.
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/core/types.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {

enum class Encoding { convert, quantize, random_blocks };

// nullopt: synth cannot write t.
std::optional<Encoding> encoding_of(GgmlType t);
// "f32, f16, bf16, q4_0, ..." — the types encoding_of accepts, lower case, for errors.
std::string writable_type_names();

// dst ← rows [row_begin, row_begin + n_rows) of t in t.type. f32 holds those rows' generated values
// (generate_rows); it is not read for Encoding::random_blocks and may then be null.
void encode_rows(const ModelPlan& plan, const TensorPlan& t, uint64_t row_begin, uint64_t n_rows,
                 const float* f32, uint8_t* dst);

}  // namespace ferry::synth
