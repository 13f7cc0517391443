#pragma once
// ggml tensor type ids as stored in GGUF, and their block geometry. The single place that knows
// which ids exist; everything else asks here.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

// How a weight matrix's bytes are laid out in memory. `file`: as in GGUF, row r at
// r·row_bytes(type, cols). `rows16`: the CPU's sixteen-row interleaved layout of the 32-value 4-bit
// formats (kernels/cpu/rows16.hpp), made at load; same size, row groups of 16 at the same offsets.
enum class WeightLayout : uint8_t { file = 0, rows16 = 1 };

struct TypeInfo {
  std::string_view name;
  uint32_t block_values;  // values per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
  bool compute;           // Ferry has CPU kernels for it: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
                          // Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4 as weights; Q8_1, Q8_K as
                          // activations only
};

// Known ids (any the GGUF format defines) → info; unknown ids → nullopt. Readers must reject those.
std::optional<TypeInfo> type_info(uint32_t id);
const TypeInfo& type_info(GgmlType t);  // for a valid enum value
std::string_view type_name(GgmlType t);
std::optional<GgmlType> type_from_name(std::string_view name);  // "q4_k", "Q4_K", "f32" ...

// Bytes of a row of n values; throws ErrorKind::format when n is not a multiple of the block or
// the product overflows.
uint64_t row_bytes(GgmlType t, uint64_t n_values);

}  // namespace ferry
