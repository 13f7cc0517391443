#pragma once
// The sixteen-row interleaved layout (WeightLayout::rows16) of Q4_0, IQ4_NL and MXFP4 weights, which
// the CPU engine makes at load for the matrices it only multiplies with (llama.cpp likewise repacks
// these types at load, into 8-row blocks). The matrix's rows are taken in groups of 16; group g
// keeps the bytes of rows 16g..16g+15 (at the same offset, 16·g·row_bytes) and holds, for each
// 32-value block i, a chunk of 16·sizeof(block) bytes:
//   the 16 rows' scale fields (2 bytes of F16 d, or MXFP4's 1-byte exponent), row by row; then
//   for j < 4, the nibble bytes 4j..4j+3 of each of the 16 rows (64 bytes per j).
// So one block step of the sixteen-row kernel (dot_rows_avx512_impl.hpp) loads its four registers
// and its scales as they are, instead of sixteen loads, a transpose and a gather. Products are
// bit-identical to the file layout's (the same integer sums and float steps per row).
#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cpu {

inline constexpr int64_t kRows16 = 16;

// The types the layout exists for.
bool rows16_type(GgmlType t);
// Whether a matrix of `rows` rows of type t (a multiple of 16) can take the layout with the active
// ISA's kernels: matmul on the layout then runs at full speed (elsewhere it unpacks first).
bool rows16_fast(GgmlType t, int64_t rows);

// src: rows × cols of type t in the file layout → dst (as many bytes) in the interleaved layout.
// rows must be a multiple of 16, cols of 32. Parallel over groups (oneTBB).
void repack_rows16(GgmlType t, const void* src, int64_t rows, int64_t cols, void* dst);
// The inverse, for ISAs without the kernel and for tests.
void unpack_rows16(GgmlType t, const void* src, int64_t rows, int64_t cols, void* dst);

}  // namespace ferry::cpu
