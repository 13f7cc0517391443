// The Gated DeltaNet decode step's small ops in one launch (deltanet.cuh gdn_decode_prep): the
// causal conv + SiLU of deltanet.cu's conv_silu_kernel, norm.cu's L2 norm of the q/k heads and
// deltanet.cu's gates, the same expressions in the same order, so the outputs are those of the
// three launches bit for bit.
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/deltanet.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

// Block h < n_ch / dim: one warp over head h's channels (conv, SiLU, state roll; then the L2 norm
// when h < n_l2_heads). The last block: the gates of every value head.
template <int K>
__global__ void __launch_bounds__(32) decode_prep_kernel(GdnDecodePrep p) {
  FERRY_PDL_WAIT();
  const int lane = threadIdx.x;
  const int64_t n_conv_heads = p.n_ch / p.dim;
  if (blockIdx.x == n_conv_heads) {
    for (int h = lane; h < p.n_heads; h += 32) {
      p.beta[h] = 1.f / (1.f + expf(-p.b[h]));
      const float x = p.a[h] + p.dt_bias[h];
      const float sp = x > 20.f ? x : logf(1.f + expf(x));
      p.g[h] = p.ssm_a[h] * sp;
    }
    return;
  }
  const int64_t c0 = int64_t{blockIdx.x} * p.dim;
  float ss = 0.f;
  for (int64_t i = lane; i < p.dim; i += 32) {
    const int64_t c = c0 + i;
    float win[K];
    float wc[K];
#pragma unroll
    for (int k = 0; k < K - 1; ++k) win[k] = p.state[k * p.n_ch + c];
#pragma unroll
    for (int k = 0; k < K; ++k) wc[k] = p.w[c * K + k];
    win[K - 1] = p.x[c];
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc += wc[k] * win[k];
    const float y = acc / (1.f + expf(-acc));
    p.y[c] = y;
    ss += y * y;
#pragma unroll
    for (int k = 0; k < K - 1; ++k) p.state[k * p.n_ch + c] = win[k + 1];
  }
  if (int64_t{blockIdx.x} >= p.n_l2_heads) return;
  ss = detail::warp_sum(ss);
  const float s = 1.f / fmaxf(sqrtf(ss), p.eps);
  for (int64_t i = lane; i < p.dim; i += 32) p.y[c0 + i] = p.y[c0 + i] * s;
}

}  // namespace

void gdn_decode_prep(const GdnDecodePrep& p, cudaStream_t stream) {
  const char* op = "gdn_decode_prep";
  require(p.x && p.w && p.state && p.y && p.x != p.y, op, "null pointer or y aliasing x");
  require(p.b && p.a && p.dt_bias && p.ssm_a && p.beta && p.g && p.n_heads >= 1, op, "null gate operand");
  require(p.dim >= 1 && p.n_ch % p.dim == 0 && p.n_l2_heads >= 0 && p.n_l2_heads <= p.n_ch / p.dim, op,
          "channels must be whole heads of dim, the L2 heads among them");
  const auto blocks = static_cast<unsigned>(p.n_ch / p.dim + 1);
  switch (p.kernel) {
    case 2: launch(decode_prep_kernel<2>, blocks, 32, 0, stream, p); break;
    case 3: launch(decode_prep_kernel<3>, blocks, 32, 0, stream, p); break;
    case 4: launch(decode_prep_kernel<4>, blocks, 32, 0, stream, p); break;
    case 5: launch(decode_prep_kernel<5>, blocks, 32, 0, stream, p); break;
    default: throw_unsupported(std::string(op) + ": conv kernel " + std::to_string(p.kernel) + " (supported: 2..5)");
  }
  FERRY_CUDA_CHECK_LAUNCH("decode_prep_kernel");
}

}  // namespace ferry::cuda
