#include <algorithm>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/deltanet.cuh"
#include "kernels/cuda/launch.cuh"

namespace ferry::cuda {
namespace {

// grid (H_v, ⌈S/32⌉), block of kRowWarps warps. Lane owns value column j; warp w owns key rows
// [w·S/kRowWarps, (w+1)·S/kRowWarps) of that column in registers, so a head's state is spread
// over 4·⌈S/32⌉ warps (enough of them in flight to hide memory latency at decode) and stays in
// registers across all tokens of the call. Per token the two reductions over key rows (Sᵀk and
// Sᵀq) combine the warps' partial sums through shared memory.
constexpr int kRowWarps = 4;

template <int S>
__global__ void __launch_bounds__(32 * kRowWarps) gdn_rule_kernel(GdnArgs a) {
  constexpr int R = S / kRowWarps;  // key rows per warp
  __shared__ float ks[S], qs[S];
  __shared__ float part[kRowWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.x;
  const int j = blockIdx.y * 32 + lane;
  const bool active = j < S;
  const int i0 = warp * R;
  const int kh = a.key_head_tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  float* st = a.state + int64_t{h} * S * S;
  float s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) s[r] = active ? st[int64_t{i0 + r} * S + j] : 0.f;

  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const float* kt = a.k + t * a.ldk + int64_t{kh} * S;
    const float* qt = a.q + t * a.ldq + int64_t{kh} * S;
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
      ks[i] = kt[i];
      qs[i] = qt[i];
    }
    const float decay = expf(a.g[t * a.n_v_heads + h]);
    const float b = a.beta[t * a.n_v_heads + h];
    const float vj = active ? a.v[t * a.ldv + int64_t{h} * S + j] : 0.f;
    __syncthreads();  // ks/qs ready; previous token's part[] reads done
    float sk = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r] *= decay;
      sk += s[r] * ks[i0 + r];
    }
    part[warp][lane] = sk;
    __syncthreads();
    sk = 0.f;
#pragma unroll
    for (int w = 0; w < kRowWarps; ++w) sk += part[w][lane];
    const float delta = b * (vj - sk);
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r] += ks[i0 + r] * delta;
      o += s[r] * qs[i0 + r];
    }
    __syncthreads();  // everyone has read part[] (sk) before it is reused for o
    part[warp][lane] = o;
    __syncthreads();
    if (warp == 0 && active) {
      float out = 0.f;
#pragma unroll
      for (int w = 0; w < kRowWarps; ++w) out += part[w][lane];
      a.out[t * a.ldo + int64_t{h} * S + j] = out * a.scale;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (active) st[int64_t{i0 + r} * S + j] = s[r];
}

// One thread per channel walks the tokens with the window in registers.
template <int K>
__global__ void conv_silu_kernel(const float* __restrict__ x, int64_t ldx, const float* __restrict__ w,
                                 float* state, float* __restrict__ y, int64_t ldy, int64_t n_tokens,
                                 int64_t n_ch) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= n_ch) return;
  float win[K];  // win[0] oldest
  float wc[K];
#pragma unroll
  for (int k = 0; k < K - 1; ++k) win[k] = state[k * n_ch + c];
#pragma unroll
  for (int k = 0; k < K; ++k) wc[k] = w[c * K + k];
  for (int64_t t = 0; t < n_tokens; ++t) {
    win[K - 1] = x[t * ldx + c];
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc += wc[k] * win[k];
    y[t * ldy + c] = acc / (1.f + expf(-acc));
#pragma unroll
    for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
  }
#pragma unroll
  for (int k = 0; k < K - 1; ++k) state[k * n_ch + c] = win[k];
}

__global__ void gates_kernel(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
                             const float* dt_bias, const float* ssm_a, float* beta, float* g,
                             int64_t ld_out, int64_t n_tokens, int n_heads) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_tokens * n_heads) return;
  const int64_t t = i / n_heads;
  const int h = static_cast<int>(i % n_heads);
  beta[t * ld_out + h] = 1.f / (1.f + expf(-b_raw[t * ldb + h]));
  const float x = a_raw[t * lda + h] + dt_bias[h];
  const float sp = x > 20.f ? x : logf(1.f + expf(x));
  g[t * ld_out + h] = ssm_a[h] * sp;
}

}  // namespace

void gdn_delta_rule(const GdnArgs& a, cudaStream_t stream) {
  const char* op = "gdn_delta_rule";
  require(a.q && a.k && a.v && a.g && a.beta && a.state && a.out, op, "null pointer argument");
  require(a.n_k_heads >= 1 && a.n_v_heads >= 1 && a.n_v_heads % a.n_k_heads == 0 && a.n_v_heads <= 65535, op,
          "H_v (" + std::to_string(a.n_v_heads) + ") must be a positive multiple of H_k (" +
              std::to_string(a.n_k_heads) + ")");
  const int64_t kw = int64_t{a.n_k_heads} * a.head_dim, vw = int64_t{a.n_v_heads} * a.head_dim;
  require(a.ldq >= kw && a.ldk >= kw && a.ldv >= vw && a.ldo >= vw, op, "token strides below the row width");
  if (a.n_tokens <= 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_v_heads), static_cast<unsigned>((a.head_dim + 31) / 32));
  switch (a.head_dim) {
    case 16: launch(gdn_rule_kernel<16>, grid, 32 * kRowWarps, 0, stream, a); break;
    case 32: launch(gdn_rule_kernel<32>, grid, 32 * kRowWarps, 0, stream, a); break;
    case 64: launch(gdn_rule_kernel<64>, grid, 32 * kRowWarps, 0, stream, a); break;
    case 128: launch(gdn_rule_kernel<128>, grid, 32 * kRowWarps, 0, stream, a); break;
    default:
      throw_unsupported(std::string(op) + ": head_dim " + std::to_string(a.head_dim) + " (supported: 16, 32, 64, 128)");
  }
  FERRY_CUDA_CHECK_LAUNCH("gdn_rule_kernel");
}

void gdn_conv_silu(const float* x, int64_t ldx, const float* w, int kernel, float* state, float* y,
                   int64_t ldy, int64_t n_tokens, int64_t n_ch, cudaStream_t stream) {
  const char* op = "gdn_conv_silu";
  require(x && w && state && y && x != y, op, "null pointer or y aliasing x");
  require(n_ch >= 1 && ldx >= n_ch && ldy >= n_ch, op, "bad shape");
  if (n_tokens <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n_ch + 127) / 128);
  switch (kernel) {
    case 2: launch(conv_silu_kernel<2>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    case 3: launch(conv_silu_kernel<3>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    case 4: launch(conv_silu_kernel<4>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    case 5: launch(conv_silu_kernel<5>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    default:
      throw_unsupported(std::string(op) + ": conv kernel " + std::to_string(kernel) + " (supported: 2..5)");
  }
  FERRY_CUDA_CHECK_LAUNCH("conv_silu_kernel");
}

void gdn_gates(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
               const float* dt_bias, const float* ssm_a, float* beta, float* g, int64_t ld_out,
               int64_t n_tokens, int n_heads, cudaStream_t stream) {
  require(b_raw && a_raw && dt_bias && ssm_a && beta && g && n_heads >= 1 && ldb >= n_heads && lda >= n_heads &&
              ld_out >= n_heads,
          "gdn_gates", "bad arguments");
  const int64_t n = n_tokens * n_heads;
  if (n <= 0) return;
  require((n + 255) / 256 < (1ll << 31), "gdn_gates", "too many tokens");
  launch(gates_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, b_raw, ldb, a_raw, lda, dt_bias, ssm_a,
         beta, g, ld_out, n_tokens, n_heads);
  FERRY_CUDA_CHECK_LAUNCH("gates_kernel");
}

}  // namespace ferry::cuda
