// Prefill matmul: the shared-memory tiled kernel, the dequantize + cuBLAS path, and the dispatcher.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

using detail::Unit;

constexpr int kTileRows = 32, kTileBatch = 32, kTileCols = 128, kTiledThreads = 256;

// Block (16, 16) threads computes a 32×32 tile of Y: thread (tx, ty) owns rows row0+tx+{0,16} and
// batch rows b0+ty+{0,16} (tx varies fastest, so Y stores are coalesced along rows). Per 128-column
// step the block decodes the 32 weight rows into shared memory once (the whole point: each weight
// byte is read once per 32 activation rows) and stages 32 activation rows next to them. The +1
// padding keeps Ws[tx][k] reads of 16 lanes on distinct banks.
template <GgmlType T>
__global__ void __launch_bounds__(kTiledThreads)
    matmul_tiled_kernel(const uint8_t* __restrict__ W, int64_t rows, int64_t cols,
                        const float* __restrict__ X, int64_t ldx, int64_t n_batch,
                        float* __restrict__ Y, int64_t ldy) {
  FERRY_PDL_WAIT();
  using U = Unit<T>;
  __shared__ float Ws[kTileRows][kTileCols + 1];
  __shared__ float Xs[kTileBatch][kTileCols + 1];
  constexpr int kUnitsPerRow = kTileCols / U::kValues;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int64_t row0 = int64_t{blockIdx.x} * kTileRows, b0 = int64_t{blockIdx.y} * kTileBatch;
  const int64_t row_bytes = detail::row_bytes_of<T>(cols);
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};

  for (int64_t k0 = 0; k0 < cols; k0 += kTileCols) {
    for (int i = threadIdx.x; i < kTileRows * kUnitsPerRow; i += kTiledThreads) {
      const int r = i / kUnitsPerRow;
      const int64_t u = k0 / U::kValues + i % kUnitsPerRow;
      float w[U::kValues];
      if (row0 + r < rows) {
        U::decode(W + (row0 + r) * row_bytes, u, w);
      } else {
#pragma unroll
        for (int j = 0; j < U::kValues; ++j) w[j] = 0.f;
      }
#pragma unroll
      for (int run = 0; run < U::kRuns; ++run) {
        const int c = static_cast<int>(U::run_start(u, run) - k0);
#pragma unroll
        for (int j = 0; j < U::kRunLen; ++j) Ws[r][c + j] = w[run * U::kRunLen + j];
      }
    }
    for (int i = threadIdx.x; i < kTileBatch * kTileCols; i += kTiledThreads) {
      const int b = i / kTileCols, k = i % kTileCols;
      Xs[b][k] = b0 + b < n_batch ? X[(b0 + b) * ldx + k0 + k] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kTileCols; ++k) {
      const float w0 = Ws[tx][k], w1 = Ws[tx + 16][k];
      const float x0 = Xs[ty][k], x1 = Xs[ty + 16][k];
      acc[0][0] += w0 * x0;
      acc[0][1] += w0 * x1;
      acc[1][0] += w1 * x0;
      acc[1][1] += w1 * x1;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t row = row0 + tx + 16 * i, b = b0 + ty + 16 * j;
      if (row < rows && b < n_batch) Y[b * ldy + row] = acc[i][j];
    }
}

// (n, cols) strided float → contiguous half or float.
template <typename Out>
__global__ void pack_activations_kernel(const float* __restrict__ X, int64_t ldx, int64_t n,
                                        int64_t cols, Out* __restrict__ dst) {
  FERRY_PDL_WAIT();
  const int64_t total = n * cols;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = X[(i / cols) * ldx + i % cols];
    if constexpr (sizeof(Out) == 2) dst[i] = __float2half_rn(v);
    else dst[i] = v;
  }
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t elt_bytes(GemmPrecision p) { return p == GemmPrecision::f16 ? 2 : 4; }

// The weight can go to cuBLAS as it is (no dequantization).
bool weight_is_native(GgmlType w, GemmPrecision p) {
  return (w == GgmlType::F16 && p == GemmPrecision::f16) || (w == GgmlType::F32 && p == GemmPrecision::f32);
}

size_t x_part_bytes(int64_t cols, int64_t n_batch, GemmPrecision p) {
  return align256(static_cast<size_t>(n_batch) * static_cast<size_t>(cols) * elt_bytes(p));
}

}  // namespace

void matmul_tiled(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X,
                  int64_t ldx, int64_t n_batch, float* Y, int64_t ldy, cudaStream_t stream) {
  const char* op = "matmul_tiled";
  check_weight_args(op, w, W, rows, cols);
  require(cols % kTileCols == 0, op, "cols (" + std::to_string(cols) + ") must be a multiple of 128");
  require(X && Y && n_batch >= 1 && ldx >= cols && ldy >= rows, op, "bad X/Y/ldx/ldy/n_batch");
  const dim3 grid(static_cast<unsigned>((rows + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>((n_batch + kTileBatch - 1) / kTileBatch));
  require((rows + kTileRows - 1) / kTileRows < (1ll << 31) && (n_batch + kTileBatch - 1) / kTileBatch <= 65535,
          op, "matrix too large for one launch");
  FERRY_DISPATCH_WEIGHT_TYPE(w, op, {
    launch(matmul_tiled_kernel<kT>, grid, kTiledThreads, 0, stream, static_cast<const uint8_t*>(W), rows,
           cols, X, ldx, n_batch, Y, ldy);
  });
  FERRY_CUDA_CHECK_LAUNCH("matmul_tiled_kernel");
}

size_t matmul_blas_workspace_bytes(GgmlType w, int64_t rows, int64_t cols, int64_t n_batch,
                                   GemmPrecision p) {
  const size_t wbytes = weight_is_native(w, p) ? 0 : align256(static_cast<size_t>(rows) * cols * elt_bytes(p));
  return x_part_bytes(cols, n_batch, p) + wbytes;
}

size_t matmul_blas_min_workspace_bytes(GgmlType w, int64_t cols, int64_t n_batch, GemmPrecision p) {
  const size_t wbytes = weight_is_native(w, p) ? 0 : align256(static_cast<size_t>(128) * cols * elt_bytes(p));
  return x_part_bytes(cols, n_batch, p) + wbytes;
}

void matmul_blas(Blas& blas, GemmPrecision p, GgmlType w, const void* W, int64_t rows,
                 int64_t cols, const float* X, int64_t ldx, int64_t n_batch, float* Y, int64_t ldy,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const char* op = "matmul_blas";
  check_weight_args(op, w, W, rows, cols);
  require(X && Y && n_batch >= 1 && ldx >= cols && ldy >= rows, op, "bad X/Y/ldx/ldy/n_batch");
  require(workspace && aligned(workspace, 256), op, "workspace must be non-null and 256-byte aligned");
  const size_t need = matmul_blas_min_workspace_bytes(w, cols, n_batch, p);
  require(workspace_bytes >= need, op,
          "workspace of " + std::to_string(workspace_bytes) + " bytes is below the minimum " + std::to_string(need));
  const bool f16 = p == GemmPrecision::f16;
  auto* ws = static_cast<uint8_t*>(workspace);

  // Activations: packed (and converted to half) unless already f32 and contiguous.
  const void* xg = X;
  if (f16 || ldx != cols) {
    const int64_t total = n_batch * cols;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535));
    if (f16) launch(pack_activations_kernel<__half>, blocks, 256, 0, stream, X, ldx, n_batch, cols, reinterpret_cast<__half*>(ws));
    else launch(pack_activations_kernel<float>, blocks, 256, 0, stream, X, ldx, n_batch, cols, reinterpret_cast<float*>(ws));
    FERRY_CUDA_CHECK_LAUNCH("pack_activations_kernel");
    xg = ws;
  }
  if (weight_is_native(w, p)) {
    blas.gemm_w_xt(f16, W, xg, Y, rows, n_batch, cols, ldy, stream);
    return;
  }
  uint8_t* wdst = ws + x_part_bytes(cols, n_batch, p);
  const size_t row_elt_bytes = static_cast<size_t>(cols) * elt_bytes(p);
  const int64_t chunk_rows = static_cast<int64_t>((workspace_bytes - x_part_bytes(cols, n_batch, p)) / row_elt_bytes);
  const uint64_t wrow_bytes = row_bytes(w, static_cast<uint64_t>(cols));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t rc = std::min(chunk_rows, rows - r0);
    const void* wsrc = static_cast<const uint8_t*>(W) + static_cast<uint64_t>(r0) * wrow_bytes;
    if (f16) dequantize_f16(w, wsrc, rc, cols, wdst, stream);
    else dequantize(w, wsrc, rc, cols, reinterpret_cast<float*>(wdst), stream);
    blas.gemm_w_xt(f16, wdst, xg, Y + r0, rc, n_batch, cols, ldy, stream);
  }
}

void matmul(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X, int64_t ldx,
            int64_t n_batch, float* Y, int64_t ldy, Blas* blas, void* workspace,
            size_t workspace_bytes, cudaStream_t stream, GemmPrecision p, bool int8_dot) {
  if (n_batch == 1 && int8_dot && matvec_q8_supported(w) && workspace && aligned(workspace, 16) &&
      workspace_bytes >= matvec_q8_workspace_bytes(cols)) {
    matvec_q8(w, W, rows, cols, X, Y, workspace, workspace_bytes, stream);
  } else if (n_batch <= kDirectMaxBatch) {
    matmul_direct(w, W, rows, cols, X, ldx, n_batch, Y, ldy, stream);
  } else if (blas && workspace && workspace_bytes >= matmul_blas_min_workspace_bytes(w, cols, n_batch, p)) {
    matmul_blas(*blas, p, w, W, rows, cols, X, ldx, n_batch, Y, ldy, workspace, workspace_bytes, stream);
  } else if (cols % kTileCols == 0) {
    matmul_tiled(w, W, rows, cols, X, ldx, n_batch, Y, ldy, stream);
  } else {
    matmul_direct(w, W, rows, cols, X, ldx, n_batch, Y, ldy, stream);
  }
}

}  // namespace ferry::cuda
