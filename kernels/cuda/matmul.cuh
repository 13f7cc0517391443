#pragma once
// Quantized matrix-vector and matrix-matrix products on the GPU. Weights stay in their GGUF
// type and are dequantized on the fly; activations are float (not quantized to q8_1 as llama.cpp
// does: float activations keep results close to exact math), except in the opt-in integer matvec
// (matvec_q8 below), which quantizes them to 8 bits to use __dp4a.
//
//   W: (rows, cols) of weight type w, row r at (const uint8_t*)W + r·row_bytes(w, cols)
//   X: (n_batch, cols) float, row stride ldx        Y: (n_batch, rows) float, row stride ldy
//   Y[b][r] = Σ_c W[r][c]·X[b][c]
// Requirements (checked, invalid_arg otherwise): W, X, Y 16-byte aligned, ldx a multiple of 4,
// cols a multiple of the type's block (256 for K-quants and IQ4_XS, 32 for Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL and MXFP4, 8 for F16/BF16, 4 for F32).
// Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS, MXFP4. All functions are asynchronous on `stream`.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cuda {

class Blas;

// One warp per output row, every weight row read once per 8 activation rows: the decode path and
// the path for small batches. Any n_batch ≥ 1.
void matmul_direct(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X,
                   int64_t ldx, int64_t n_batch, float* Y, int64_t ldy, cudaStream_t stream);

inline void matvec(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
                   cudaStream_t stream) {
  matmul_direct(w, W, rows, cols, x, cols, 1, y, rows, stream);
}

// Integer ("q8") matvec, llama.cpp's MMVQ idea: x is quantized once to 8-bit blocks of 32 into
// the caller's workspace (int8 (cols), then float2 (d, d·Σq) per block: kernels/cuda/
// quant_q8_device.cuh), then each warp dots its rows with __dp4a over unpacked weight quants,
// float scales applied per 16 or 32 values. Results are W·x̃ with x̃ the 8-bit-rounded x (NMSE vs
// float x ~1e-5…1e-4). Types: the quantized ones (all but F32, F16, BF16). The caller opts in
// (matmul's int8_dot; CudaOpsOptions::int8_dot, `--cuda-int8-dot`) until a GPU run says it is
// faster than the float matvec.
bool matvec_q8_supported(GgmlType w);
size_t matvec_q8_workspace_bytes(int64_t cols);  // 1.25 bytes per column
// workspace ← x (n floats, n % 32 == 0) quantized; workspace 16-byte aligned.
void quantize_q8(const float* x, int64_t n, void* workspace, size_t workspace_bytes, cudaStream_t stream);
// y (rows) ← W · x̃ for activations already quantized by quantize_q8 into x_q8 (cols values).
void matvec_q8_quantized(GgmlType w, const void* W, int64_t rows, int64_t cols, const void* x_q8, float* y,
                         cudaStream_t stream);
// quantize_q8 then matvec_q8_quantized; workspace ≥ matvec_q8_workspace_bytes(cols).
void matvec_q8(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* x, float* y, void* workspace,
               size_t workspace_bytes, cudaStream_t stream);

// Shared-memory tiled kernel (32 rows × 32 batch rows × 128 columns per tile), weights dequantized
// into shared memory once per tile: the prefill path when cuBLAS is absent. cols % 128 == 0.
void matmul_tiled(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X,
                  int64_t ldx, int64_t n_batch, float* Y, int64_t ldy, cudaStream_t stream);

enum class GemmPrecision { f16, f32 };

// Workspace for matmul_blas to do the whole product in one GEMM; less (down to min_bytes) makes
// it process the rows in chunks.
size_t matmul_blas_workspace_bytes(GgmlType w, int64_t rows, int64_t cols, int64_t n_batch,
                                   GemmPrecision p);
size_t matmul_blas_min_workspace_bytes(GgmlType w, int64_t cols, int64_t n_batch, GemmPrecision p);

// Dequantize W (chunk by chunk) and convert X into `workspace`, then one cuBLAS GEMM per chunk
// (f16 inputs on tensor cores, or f32), f32 accumulation. The prefill path for large batches.
void matmul_blas(Blas& blas, GemmPrecision p, GgmlType w, const void* W, int64_t rows,
                 int64_t cols, const float* X, int64_t ldx, int64_t n_batch, float* Y, int64_t ldy,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Picks a path: n_batch == 1 with int8_dot, a type with an integer dot and a workspace of
// matvec_q8_workspace_bytes(cols) → matvec_q8; n_batch ≤ kDirectMaxBatch → direct; else cuBLAS
// when blas is given and the workspace is at least the minimum; else tiled (when cols % 128 == 0);
// else direct.
inline constexpr int64_t kDirectMaxBatch = 8;
void matmul(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X, int64_t ldx,
            int64_t n_batch, float* Y, int64_t ldy, Blas* blas, void* workspace,
            size_t workspace_bytes, cudaStream_t stream, GemmPrecision p = GemmPrecision::f16,
            bool int8_dot = false);

// dst (rows, cols) float or half, contiguous ← W dequantized (bit-exact with ggml's reference).
void dequantize(GgmlType w, const void* W, int64_t rows, int64_t cols, float* dst,
                cudaStream_t stream);
void dequantize_f16(GgmlType w, const void* W, int64_t rows, int64_t cols, void* dst_half,
                    cudaStream_t stream);

// Embedding lookup: out[t] (n_embd floats) ← row ids[t] of table (n_vocab, n_embd) of type w.
// ids is a device array; an id outside [0, n_vocab) yields a row of NaN (callers validate ids on
// the host; the NaN makes a missed check visible instead of reading out of bounds).
void embed_rows(GgmlType w, const void* table, int64_t n_vocab, int64_t n_embd,
                const int32_t* ids, int64_t n_tokens, float* out, cudaStream_t stream);

// Checks shared by the launchers (alignment, block multiple); `op` names the caller.
void check_weight_args(const char* op, GgmlType w, const void* W, int64_t rows, int64_t cols);

}  // namespace ferry::cuda
