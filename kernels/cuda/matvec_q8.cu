// Integer ("q8") matvec: activation quantization to 8-bit blocks, then __dp4a dots per weight
// block (kernels/cuda/quant_q8_device.cuh). Opt-in next to the float matvec of matvec.cu.
#include <cmath>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_q8_device.cuh"

namespace ferry::cuda {
namespace {

using detail::kQ8Block;
using detail::Q8Dot;

constexpr int kWarpsPerBlock = 4;
constexpr int64_t kMultiRowMinRows = 8192;  // as matvec.cu: 4 rows per warp from here on

// One warp per q8 block of 32 values (lane i quantizes x[32·ib + i]): d = max|x| / 127,
// q = round(x / d) (0 for an all-zero block), s = d·Σq.
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    quantize_q8_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ xq,
                       float2* __restrict__ xds) {
  FERRY_PDL_WAIT();
  const int lane = threadIdx.x & 31;
  const int64_t ib = int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5);
  if (ib >= n_blocks) return;  // whole warps only
  const float v = x[ib * kQ8Block + lane];
  const float amax = detail::warp_max(fabsf(v));
  const float d = amax / 127.f;
  const int q = amax == 0.f ? 0 : static_cast<int>(roundf(v / d));
  const float sum = detail::warp_sum(static_cast<float>(q));  // |Σq| ≤ 32·127: exact in float
  xq[ib * kQ8Block + lane] = static_cast<int8_t>(q);
  if (lane == 0) xds[ib] = float2{d, d * sum};
}

// RPW weight rows per warp share each lane's activation fragment (loaded once per unit); lane
// walks units lane, lane + 32, ... (Q8Dot<T>::kValues columns each).
template <GgmlType T, int RPW>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matvec_q8_kernel(const uint8_t* __restrict__ W, int64_t rows, int64_t cols,
                     const int8_t* __restrict__ xq, const float2* __restrict__ xds,
                     float* __restrict__ y) {
  FERRY_PDL_WAIT();
  using D = Q8Dot<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5)) * RPW;
  if (row0 >= rows) return;
  const int64_t rb = detail::row_bytes_of<T>(cols);
  const int64_t n_units = cols / D::kValues;
  const uint8_t* wr[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r)
    wr[r] = W + (row0 + r < rows ? row0 + r : row0) * rb;  // clamp: stay in bounds
  float acc[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) acc[r] = 0.f;
  for (int64_t u = lane; u < n_units; u += 32) {
    typename D::Frag f;
    D::load_x(u, xq, xds, f);
#pragma unroll
    for (int r = 0; r < RPW; ++r) acc[r] += D::dot(wr[r], u, f);
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const float s = detail::warp_sum(acc[r]);
    if (lane == 0 && row0 + r < rows) y[row0 + r] = s;
  }
}

int64_t q8_unit_values(GgmlType w) {
  int64_t v = 0;
  FERRY_DISPATCH_Q8_DOT_TYPE(w, "matvec_q8", v = Q8Dot<kT>::kValues);
  return v;
}

}  // namespace

bool matvec_q8_supported(GgmlType w) {
  switch (w) {
    FERRY_Q8_DOT_TYPE_CASES(return Q8Dot<kT>::kValues > 0)
    default: return false;
  }
}

size_t matvec_q8_workspace_bytes(int64_t cols) {
  return static_cast<size_t>(cols) + static_cast<size_t>(cols / kQ8Block) * sizeof(float2);
}

void quantize_q8(const float* x, int64_t n, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  const char* op = "quantize_q8";
  require(x != nullptr && workspace != nullptr, op, "null x or workspace");
  require(n > 0 && n % kQ8Block == 0, op,
          "n (" + std::to_string(n) + ") must be a positive multiple of 32");
  require(aligned(workspace, 16), op, "workspace must be 16-byte aligned");
  require(workspace_bytes >= matvec_q8_workspace_bytes(n), op,
          "workspace of " + std::to_string(workspace_bytes) + " bytes is below " +
              std::to_string(matvec_q8_workspace_bytes(n)));
  const int64_t n_blocks = n / kQ8Block;
  const auto grid = static_cast<unsigned>((n_blocks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto* xq = static_cast<int8_t*>(workspace);
  auto* xds = reinterpret_cast<float2*>(xq + n);
  launch(quantize_q8_kernel, grid, 32 * kWarpsPerBlock, 0, stream, x, n_blocks, xq, xds);
  FERRY_CUDA_CHECK_LAUNCH("quantize_q8_kernel");
}

void matvec_q8_quantized(GgmlType w, const void* W, int64_t rows, int64_t cols, const void* x_q8,
                         float* y, cudaStream_t stream) {
  const char* op = "matvec_q8";
  check_weight_args(op, w, W, rows, cols);
  require(x_q8 != nullptr && aligned(x_q8, 16), op,
          "quantized activations must be non-null and 16-byte aligned");
  require(y != nullptr, op, "y is null");
  const int64_t uv = q8_unit_values(w);
  require(cols % uv == 0, op,
          "cols (" + std::to_string(cols) + ") must be a multiple of " + std::to_string(uv));
  const auto* xq = static_cast<const int8_t*>(x_q8);
  const auto* xds = reinterpret_cast<const float2*>(xq + cols);
  const auto* w8 = static_cast<const uint8_t*>(W);
  FERRY_DISPATCH_Q8_DOT_TYPE(w, op, {
    if (rows >= kMultiRowMinRows) {
      const auto g4 = static_cast<unsigned>((rows + 4 * kWarpsPerBlock - 1) / (4 * kWarpsPerBlock));
      launch(matvec_q8_kernel<kT, 4>, g4, 32 * kWarpsPerBlock, 0, stream, w8, rows, cols, xq, xds,
             y);
    } else {
      const auto g1 = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
      require(g1 < (1u << 31), op, "too many rows");
      launch(matvec_q8_kernel<kT, 1>, g1, 32 * kWarpsPerBlock, 0, stream, w8, rows, cols, xq, xds,
             y);
    }
  });
  FERRY_CUDA_CHECK_LAUNCH("matvec_q8_kernel");
}

void matvec_q8(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
               void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  require(matvec_q8_supported(w), "matvec_q8",
          "weight type id " + std::to_string(static_cast<unsigned>(w)) +
              " has no integer dot (" FERRY_Q8_DOT_TYPE_NAMES ")");
  check_weight_args("matvec_q8", w, W, rows, cols);
  quantize_q8(x, cols, workspace, workspace_bytes, stream);
  matvec_q8_quantized(w, W, rows, cols, workspace, y, stream);
}

}  // namespace ferry::cuda
