#pragma once
// Quantized matrix-vector and small-batch matrix products on the CPU. Paths: scalar reference,
// AVX2, AVX-512 (and AVX-512 VNNI where present), chosen at run time; parallel over rows with oneTBB.
#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/core/types.hpp"

namespace ferry::cpu {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, avx512vnni = 3 };
Isa detected_isa();            // best the CPU supports
Isa active_isa();              // what dispatch uses now
void set_isa(
    Isa isa);  // tests and FERRY_ISA (runtime/cli/main.cpp) cap the path; clamps to detected_isa()
const char* isa_name(Isa isa);
std::optional<Isa> isa_from_name(
    std::string_view name);  // isa_name's inverse; nullopt for another name

// Dot of one weight row (type w, n values) with an activation row already in vec_dot_type(w).
float vec_dot(GgmlType w, const void* wrow, const void* xq, int64_t n);      // dispatched
float vec_dot_ref(GgmlType w, const void* wrow, const void* xq, int64_t n);  // scalar reference

// Y[b][r] = Σ_c W[r][c] · X[b][c]   for r < rows, b < n_batch.
//   W: rows × cols of type w, row r at (const uint8_t*)W + r·row_bytes(w, cols)   // (rows, cols)
//   X: n_batch × cols float, row stride ldx (≥ cols)                              // (n_batch, cols)
//   Y: n_batch × rows float, row stride ldy (≥ rows)                              // (n_batch, rows)
// Activations are quantized once per call to vec_dot_type(w). Parallel over rows (oneTBB) when
// the work is large enough; `parallel=false` forces the calling thread only (used inside
// already-parallel expert loops).
// Results are bit-identical to llama.cpp's x86 CPU backend (see dot_ref.cpp), which adds in
// different orders depending on the product's shape, and so does this:
//   Q4_K (repacked there): a dense batch of n rows takes its 4-row kernel for the first
//        n − n mod 4 rows and its 1-row kernel for the rest; expert products (mul_mat_id) the
//        1-row kernel for every row — matmul_q with dense = false;
//   Q5_K, Q6_K, Q2_K, Q3_K, IQ4_XS: its tiled kernel when the product has 8 or more activation
//        rows (dense, or the tokens routed to one expert), else vec_dot;
//   Q4_0, IQ4_NL, MXFP4 (repacked there when the matrix has a multiple of 8 rows): the repacked
//        kernels' order for such matrices, dense or expert (`rows` must then be the matrix's, not a
//        slice of it); else IQ4_NL's dense products of 2+ rows take tinyBLAS's order, the rest
//        vec_dot's (Q4_0's tinyBLAS order is its vec_dot order);
//   Q8_0, Q4_1, Q5_0, Q5_1 and the float types: one order.
// `layout` rows16: W is in the interleaved layout of rows16.hpp (Q4_0, IQ4_NL, MXFP4; rows a
// multiple of 16), with the same results.
void matmul(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X, int64_t ldx,
            int64_t n_batch, float* Y, int64_t ldy, bool parallel = true,
            WeightLayout layout = WeightLayout::file);

inline void matvec(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
                   bool parallel = true) {
  matmul(w, W, rows, cols, x, cols, 1, y, rows, parallel);
}

// As matmul, with X already quantized to vec_dot_type(w) (row stride ldxq bytes); lets a caller
// quantize an activation once and reuse it for several weights (gate and up of all experts).
void matmul_q(GgmlType w, const void* W, int64_t rows, int64_t cols, const void* Xq, int64_t ldxq,
              int64_t n_batch, float* Y, int64_t ldy, bool parallel = true, bool dense = false,
              WeightLayout layout = WeightLayout::file);

}  // namespace ferry::cpu
