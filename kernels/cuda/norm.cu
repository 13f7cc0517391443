// RMSNorm, gated RMSNorm, L2 norm: one warp per row.
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/norm_device.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

constexpr int kWarps = 4;

using detail::NormKind;

// Row r is head r % n_heads of token r / n_heads: at x + token·ldx + head·hx (likewise z, y), so
// one kernel serves plain rows (n_heads = 1) and per-head vectors inside wider token rows.
struct RowLayout {
  int64_t n_heads, ldx, hx, ldz, hz, ldy, hy;
};

template <NormKind K>
__global__ void __launch_bounds__(32 * kWarps)
    norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                const float* __restrict__ z, float* y, RowLayout L, int64_t n_rows, int64_t n,
                float eps, float extra_scale) {
  FERRY_PDL_WAIT();
  const int64_t r = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  if (r >= n_rows) return;
  const int64_t tok = r / L.n_heads, head = r % L.n_heads;
  const float* zr = K == NormKind::rms_gated ? z + tok * L.ldz + head * L.hz : nullptr;
  detail::norm_row<K>(x + tok * L.ldx + head * L.hx, w, zr, y + tok * L.ldy + head * L.hy, n, eps, extra_scale);
}

template <NormKind K>
void run_norm(const char* op, const float* x, const float* w, const float* z, float* y,
            const RowLayout& L, int64_t n_rows, int64_t n, float eps, float extra_scale,
            cudaStream_t stream) {
  require(x && y, op, "null x or y");
  require(n > 0 && n_rows >= 0 && L.n_heads >= 1, op, "bad shape");
  if (n_rows == 0) return;
  const int64_t blocks = (n_rows + kWarps - 1) / kWarps;
  require(blocks < (1ll << 31), op, "too many rows");
  launch(norm_kernel<K>, static_cast<unsigned>(blocks), 32 * kWarps, 0, stream, x, w, z, y, L, n_rows, n,
         eps, extra_scale);
  FERRY_CUDA_CHECK_LAUNCH("norm_kernel");
}

}  // namespace

void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t n_rows,
             int64_t n, float eps, cudaStream_t stream) {
  require(ldx >= n && ldy >= n, "rmsnorm", "strides below the row length");
  run_norm<NormKind::rms>("rmsnorm", x, w, nullptr, y, RowLayout{1, ldx, 0, 0, 0, ldy, 0}, n_rows, n, eps, 1.f, stream);
}

void rmsnorm_gated(const float* x, int64_t ldx, const float* w, const float* z, int64_t ldz,
                   float* y, int64_t ldy, int64_t n_rows, int64_t n, float eps, cudaStream_t stream) {
  require(w && z && ldz >= n && ldx >= n && ldy >= n, "rmsnorm_gated", "weight and gate are required");
  run_norm<NormKind::rms_gated>("rmsnorm_gated", x, w, z, y, RowLayout{1, ldx, 0, ldz, 0, ldy, 0}, n_rows, n,
                              eps, 1.f, stream);
}

void l2norm(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n_rows, int64_t n,
            float eps, float scale, cudaStream_t stream) {
  require(ldx >= n && ldy >= n, "l2norm", "strides below the row length");
  run_norm<NormKind::l2>("l2norm", x, nullptr, nullptr, y, RowLayout{1, ldx, 0, 0, 0, ldy, 0}, n_rows, n, eps,
                       scale, stream);
}

void l2norm_heads(float* x, int64_t ld, int64_t n_tokens, int n_heads, int dim, float eps,
                  cudaStream_t stream) {
  require(n_heads >= 1 && dim >= 1 && ld >= int64_t{n_heads} * dim, "l2norm_heads", "bad shape");
  run_norm<NormKind::l2>("l2norm_heads", x, nullptr, nullptr, x, RowLayout{n_heads, ld, dim, 0, 0, ld, dim},
                       n_tokens * n_heads, dim, eps, 1.f, stream);
}

void rmsnorm_gated_heads(const float* o, int64_t ldo, const float* z, int64_t ldz, const float* w,
                         float* out, int64_t ldout, int64_t n_tokens, int n_heads, int dim,
                         float eps, cudaStream_t stream) {
  const int64_t row = int64_t{n_heads} * dim;
  require(w && z && n_heads >= 1 && dim >= 1 && ldo >= row && ldz >= row && ldout >= row,
          "rmsnorm_gated_heads", "bad shape or null weight/gate");
  run_norm<NormKind::rms_gated>("rmsnorm_gated_heads", o, w, z, out,
                              RowLayout{n_heads, ldo, dim, ldz, dim, ldout, dim}, n_tokens * n_heads, dim,
                              eps, 1.f, stream);
}

}  // namespace ferry::cuda
