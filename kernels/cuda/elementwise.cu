// RoPE, SwiGLU, add/scale, shared-expert gate, KV-cache store.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/rope_device.cuh"

namespace ferry::cuda {
namespace {

unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 1 << 20));
}

#define FERRY_GRID_STRIDE(i, n)                                                      \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n);         \
       i += int64_t{gridDim.x} * blockDim.x)

// grid: (n_rot/2 pairs in x, heads in y, tokens in z).
__global__ void rope_neox_kernel(float* x, int head_dim, int n_rot, int64_t ld_token,
                                 int64_t ld_head, const int32_t* __restrict__ pos,
                                 float theta_scale) {
  FERRY_PDL_WAIT();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int half = n_rot / 2;
  if (i >= half) return;
  detail::rope_neox_pair(x + int64_t{blockIdx.z} * ld_token + int64_t{blockIdx.y} * ld_head, i, half, pos[blockIdx.z],
                         theta_scale);
}

__global__ void swiglu_kernel(const float* g, const float* u, float* y, int64_t n) {
  FERRY_PDL_WAIT();
  FERRY_GRID_STRIDE(i, n) {
    const float a = g[i];
    y[i] = a / (1.f + expf(-a)) * u[i];
  }
}

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  FERRY_PDL_WAIT();
  FERRY_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void scale_kernel(const float* x, float s, float* y, int64_t n) {
  FERRY_PDL_WAIT();
  FERRY_GRID_STRIDE(i, n) y[i] = x[i] * s;
}

__global__ void sigmoid_gate_add_kernel(float* y, const float* s, const float* gate_logit,
                                        int64_t n_tokens, int64_t n) {
  FERRY_PDL_WAIT();
  FERRY_GRID_STRIDE(i, n_tokens * n) {
    const float g = 1.f / (1.f + expf(-gate_logit[i / n]));
    y[i] += g * s[i];
  }
}

template <typename T>
__global__ void kv_store_kernel(const float* __restrict__ src, int64_t ld_src, T* cache,
                                int64_t p0, int64_t n_tokens, int64_t row_elems) {
  FERRY_PDL_WAIT();
  FERRY_GRID_STRIDE(i, n_tokens * row_elems) {
    const int64_t t = i / row_elems, e = i % row_elems;
    const float v = src[t * ld_src + e];
    if constexpr (sizeof(T) == 2) cache[(p0 + t) * row_elems + e] = __float2half_rn(v);
    else cache[(p0 + t) * row_elems + e] = v;
  }
}

}  // namespace

void rope_neox(float* x, int64_t n_tokens, int n_heads, int head_dim, int n_rot, int64_t ld_token,
               int64_t ld_head, const int32_t* pos, float freq_base, cudaStream_t stream) {
  const char* op = "rope_neox";
  require(x && pos, op, "null x or pos");
  require(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim, op,
          "n_rot (" + std::to_string(n_rot) + ") must be even and ≤ head_dim (" + std::to_string(head_dim) + ")");
  require(n_heads >= 1 && n_heads <= 65535 && n_tokens >= 0 && n_tokens <= 65535, op,
          "n_heads and n_tokens must be ≤ 65535 per launch");
  if (n_tokens == 0) return;
  const float theta_scale = detail::rope_theta_scale(freq_base, n_rot);
  const int threads = std::min(128, n_rot / 2);
  const dim3 grid(static_cast<unsigned>((n_rot / 2 + threads - 1) / threads), static_cast<unsigned>(n_heads),
                  static_cast<unsigned>(n_tokens));
  launch(rope_neox_kernel, grid, threads, 0, stream, x, head_dim, n_rot, ld_token, ld_head, pos, theta_scale);
  FERRY_CUDA_CHECK_LAUNCH("rope_neox_kernel");
}

void swiglu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream) {
  require(g && u && y, "swiglu", "null pointer");
  if (n <= 0) return;
  launch(swiglu_kernel, grid_for(n, 256), 256, 0, stream, g, u, y, n);
  FERRY_CUDA_CHECK_LAUNCH("swiglu_kernel");
}

void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  require(a && b && y, "add", "null pointer");
  if (n <= 0) return;
  launch(add_kernel, grid_for(n, 256), 256, 0, stream, a, b, y, n);
  FERRY_CUDA_CHECK_LAUNCH("add_kernel");
}

void scale(const float* x, float s, float* y, int64_t n, cudaStream_t stream) {
  require(x && y, "scale", "null pointer");
  if (n <= 0) return;
  launch(scale_kernel, grid_for(n, 256), 256, 0, stream, x, s, y, n);
  FERRY_CUDA_CHECK_LAUNCH("scale_kernel");
}

void sigmoid_gate_add(float* y, const float* s, const float* gate_logit, int64_t n_tokens,
                      int64_t n, cudaStream_t stream) {
  require(y && s && gate_logit, "sigmoid_gate_add", "null pointer");
  if (n_tokens <= 0 || n <= 0) return;
  launch(sigmoid_gate_add_kernel, grid_for(n_tokens * n, 256), 256, 0, stream, y, s, gate_logit, n_tokens, n);
  FERRY_CUDA_CHECK_LAUNCH("sigmoid_gate_add_kernel");
}

void kv_store(const float* src, int64_t ld_src, void* cache, GgmlType cache_type, int64_t p0,
              int64_t n_tokens, int64_t row_elems, cudaStream_t stream, int n_rot, float rot_scale) {
  const char* op = "kv_store";
  if (cache_type != GgmlType::F16 && cache_type != GgmlType::F32) {
    kv_store_quantized(src, ld_src, cache, cache_type, p0, n_tokens, row_elems, n_rot, rot_scale, stream);
    return;
  }
  require(src && cache && p0 >= 0 && ld_src >= row_elems && row_elems > 0, op, "bad arguments");
  if (n_tokens <= 0) return;
  const unsigned grid = grid_for(n_tokens * row_elems, 256);
  if (cache_type == GgmlType::F16) {
    launch(kv_store_kernel<__half>, grid, 256, 0, stream, src, ld_src, static_cast<__half*>(cache), p0, n_tokens, row_elems);
  } else if (cache_type == GgmlType::F32) {
    launch(kv_store_kernel<float>, grid, 256, 0, stream, src, ld_src, static_cast<float*>(cache), p0, n_tokens, row_elems);
  } else {
    throw_unsupported("kv_store: cache type id " + std::to_string(static_cast<unsigned>(cache_type)));
  }
  FERRY_CUDA_CHECK_LAUNCH("kv_store_kernel");
}

}  // namespace ferry::cuda
