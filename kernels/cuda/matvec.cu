// Direct (warp-per-row) quantized matmul for decode and small batches, dequantize and embedding.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

using detail::Unit;

constexpr int kWarpsPerBlock = 4;

// grid.x: blocks of kWarpsPerBlock rows; grid.y: chunks of NB activation rows.
// Each lane walks units lane, lane+32, ...; NB activation rows share each decoded unit.
template <GgmlType T, int NB>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matmul_direct_kernel(const uint8_t* __restrict__ W, int64_t rows, int64_t cols,
                         const float* __restrict__ X, int64_t ldx, int64_t n_batch,
                         float* __restrict__ Y, int64_t ldy) {
  FERRY_PDL_WAIT();
  static_assert(NB > 1, "single vectors use matvec_rows_kernel");
  using U = Unit<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t b0 = int64_t{blockIdx.y} * NB;
  const int nb = n_batch - b0 < NB ? static_cast<int>(n_batch - b0) : NB;
  const uint8_t* wrow = W + row * detail::row_bytes_of<T>(cols);
  const float* x0 = X + b0 * ldx;
  const int64_t n_units = cols / U::kValues;

  float acc[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) acc[b] = 0.f;
  {
    // Several activation rows: decode each unit once and reuse it for all of them.
    for (int64_t u = lane; u < n_units; u += 32) {
      float w[U::kValues];
      U::decode(wrow, u, w);
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        if (b < nb) {
#pragma unroll
          for (int r = 0; r < U::kRuns; ++r) {
            const float4* xr = reinterpret_cast<const float4*>(x0 + b * ldx + U::run_start(u, r));
#pragma unroll
            for (int q = 0; q < U::kRunLen / 4; ++q) {
              const float4 xv = xr[q];
              const float* wv = w + r * U::kRunLen + 4 * q;
              acc[b] += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    const float s = detail::warp_sum(acc[b]);
    if (lane == 0 && b < nb) Y[(b0 + b) * ldy + row] = s;
  }
}

// Single vector, RPW weight rows per warp. Every weight value costs 4 bytes of activation reads
// from L1; with one row per warp that L1 traffic, not HBM, bounds large matvecs, so big matrices
// give each warp 4 rows that share each activation load (the compiler reuses the loads of the
// inlined unit dots). Small matrices keep 1 row per warp for parallelism.
template <GgmlType T, int RPW>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matvec_rows_kernel(const uint8_t* __restrict__ W, int64_t rows, int64_t cols,
                       const float* __restrict__ x, float* __restrict__ y) {
  FERRY_PDL_WAIT();
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5)) * RPW;
  if (row0 >= rows) return;
  const int64_t rb = detail::row_bytes_of<T>(cols);
  const int64_t n_units = cols / Unit<T>::kValues;
  const uint8_t* wr[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) wr[r] = W + (row0 + r < rows ? row0 + r : row0) * rb;  // clamp: stay in bounds
  float acc[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) acc[r] = 0.f;
  for (int64_t u = lane; u < n_units; u += 32) {
#pragma unroll
    for (int r = 0; r < RPW; ++r) acc[r] += detail::unit_dot<T>(wr[r], u, x);
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const float s = detail::warp_sum(acc[r]);
    if (lane == 0 && row0 + r < rows) y[row0 + r] = s;
  }
}

constexpr int64_t kMultiRowMinRows = 8192;

// One block per row; threads walk the row's units.
template <GgmlType T, typename Out>
__global__ void dequantize_kernel(const uint8_t* __restrict__ W, int64_t cols, Out* __restrict__ dst) {
  FERRY_PDL_WAIT();
  const int64_t row = blockIdx.x;
  const uint8_t* wrow = W + row * detail::row_bytes_of<T>(cols);
  const int64_t n_units = cols / Unit<T>::kValues;
  for (int64_t u = threadIdx.x; u < n_units; u += blockDim.x)
    detail::unit_store<T, Out>(wrow, u, dst + row * cols);
}

template <GgmlType T>
__global__ void embed_kernel(const uint8_t* __restrict__ table, int64_t n_vocab, int64_t n_embd,
                             const int32_t* __restrict__ ids, float* __restrict__ out) {
  FERRY_PDL_WAIT();
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float* o = out + t * n_embd;
  if (id < 0 || id >= n_vocab) {
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) o[i] = NAN;
    return;
  }
  const uint8_t* wrow = table + int64_t{id} * detail::row_bytes_of<T>(n_embd);
  const int64_t n_units = n_embd / Unit<T>::kValues;
  for (int64_t u = threadIdx.x; u < n_units; u += blockDim.x) detail::unit_store<T, float>(wrow, u, o);
}

int64_t unit_values(GgmlType w) {
  int64_t v = 0;
  FERRY_DISPATCH_WEIGHT_TYPE(w, "matmul", v = Unit<kT>::kValues);
  return v;
}

int64_t block_values(GgmlType w) {
  int64_t v = 0;
  FERRY_DISPATCH_WEIGHT_TYPE(w, "matmul", v = Unit<kT>::kBlockValues);
  return v;
}

}  // namespace

void check_weight_args(const char* op, GgmlType w, const void* W, int64_t rows, int64_t cols) {
  require(W != nullptr, op, "weight pointer is null");
  require(rows > 0 && cols > 0, op, "empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
  require(aligned(W, 16), op, "weight pointer not 16-byte aligned");
  // The unit is a multiple of the block for every type, so this also checks whole blocks.
  const int64_t uv = std::max(unit_values(w), block_values(w));
  require(cols % uv == 0, op,
          "cols (" + std::to_string(cols) + ") must be a multiple of " + std::to_string(uv) +
              " for weight type id " + std::to_string(static_cast<unsigned>(w)));
}

void matmul_direct(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X,
                   int64_t ldx, int64_t n_batch, float* Y, int64_t ldy, cudaStream_t stream) {
  const char* op = "matmul_direct";
  check_weight_args(op, w, W, rows, cols);
  require(n_batch >= 1, op, "n_batch must be ≥ 1");
  require(X && Y && aligned(X, 16), op, "X must be non-null and 16-byte aligned");
  require(ldx >= cols && ldx % 4 == 0, op, "ldx must be ≥ cols and a multiple of 4");
  require(ldy >= rows || n_batch == 1, op, "ldy must be ≥ rows");
  const unsigned grid_x = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  require(grid_x < (1u << 31), op, "too many rows");
  const auto* w8 = static_cast<const uint8_t*>(W);
  FERRY_DISPATCH_WEIGHT_TYPE(w, op, {
    if (n_batch == 1 && rows >= kMultiRowMinRows) {
      const auto g4 = static_cast<unsigned>((rows + 4 * kWarpsPerBlock - 1) / (4 * kWarpsPerBlock));
      launch(matvec_rows_kernel<kT, 4>, g4, 32 * kWarpsPerBlock, 0, stream, w8, rows, cols, X, Y);
    } else if (n_batch == 1) {
      launch(matvec_rows_kernel<kT, 1>, grid_x, 32 * kWarpsPerBlock, 0, stream, w8, rows, cols, X, Y);
    } else {
      const auto chunks = static_cast<unsigned>((n_batch + 7) / 8);
      require(chunks <= 65535, op, "n_batch too large for the direct path");
      launch(matmul_direct_kernel<kT, 8>, dim3(grid_x, chunks), 32 * kWarpsPerBlock, 0, stream,
             w8, rows, cols, X, ldx, n_batch, Y, ldy);
    }
  });
  FERRY_CUDA_CHECK_LAUNCH("matmul_direct_kernel");
}

void dequantize(GgmlType w, const void* W, int64_t rows, int64_t cols, float* dst,
                cudaStream_t stream) {
  check_weight_args("dequantize", w, W, rows, cols);
  require(dst != nullptr, "dequantize", "dst is null");
  require(rows < (1ll << 31), "dequantize", "too many rows");
  FERRY_DISPATCH_WEIGHT_TYPE(w, "dequantize", {
    launch(dequantize_kernel<kT, float>, static_cast<unsigned>(rows), 128, 0, stream,
           static_cast<const uint8_t*>(W), cols, dst);
  });
  FERRY_CUDA_CHECK_LAUNCH("dequantize_kernel");
}

void dequantize_f16(GgmlType w, const void* W, int64_t rows, int64_t cols, void* dst_half,
                    cudaStream_t stream) {
  check_weight_args("dequantize_f16", w, W, rows, cols);
  require(dst_half != nullptr, "dequantize_f16", "dst is null");
  require(rows < (1ll << 31), "dequantize_f16", "too many rows");
  FERRY_DISPATCH_WEIGHT_TYPE(w, "dequantize_f16", {
    launch(dequantize_kernel<kT, __half>, static_cast<unsigned>(rows), 128, 0, stream,
           static_cast<const uint8_t*>(W), cols, static_cast<__half*>(dst_half));
  });
  FERRY_CUDA_CHECK_LAUNCH("dequantize_kernel<half>");
}

void embed_rows(GgmlType w, const void* table, int64_t n_vocab, int64_t n_embd,
                const int32_t* ids, int64_t n_tokens, float* out, cudaStream_t stream) {
  check_weight_args("embed_rows", w, table, n_vocab, n_embd);
  require(ids && out, "embed_rows", "null ids or out");
  if (n_tokens == 0) return;
  require(n_tokens > 0 && n_tokens < (1ll << 31), "embed_rows", "bad n_tokens");
  FERRY_DISPATCH_WEIGHT_TYPE(w, "embed_rows", {
    launch(embed_kernel<kT>, static_cast<unsigned>(n_tokens), 128, 0, stream,
           static_cast<const uint8_t*>(table), n_vocab, n_embd, ids, out);
  });
  FERRY_CUDA_CHECK_LAUNCH("embed_kernel");
}

}  // namespace ferry::cuda
