// Quantize-on-write of KV cache rows (BF16 and the 32-value block types of llama.cpp's -ctk/-ctv
// set), with the Hadamard rotation of quantized caches. The bytes equal kernels/cpu's
// quantize_row_cpu of the rotated row (CpuOps::kv_store): the same float operations in the same
// order, through mul/add/sub so that nvcc cannot contract them into FMAs.
#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kv_quant_device.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

using detail::add;
using detail::mul;
using detail::sub;

constexpr int kStoreThreads = 128;
// A token row (n_head_kv·head_dim values) is staged in shared memory, rotated and quantized there.
constexpr int64_t kMaxStoreRowValues = 48 * 1024 / 4;

__device__ __forceinline__ uint16_t fp16_of(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// ggml-cpu's x86 quantize_row_q8_0 (kernels/cpu/activation.cpp: 127/amax, half to even).
__device__ void quantize_q8_0_block(const float* x, uint8_t* b) {
  float amax = 0.f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.f;
  put_u16(b, fp16_of(d));
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(rintf(mul(x[j], id))));
}

// ggml's quantize_row_q{4,5}_0_ref (kernels/cpu/quantize_ref.cpp quantize_sym_block): d = max/−nmax
// from the value of largest magnitude, q = min(2·nmax − 1, trunc(x/d + nmax + 0.5)).
// L: the block layout (quant_device_more.cuh: offsets of qs and qh).
template <int kNmax, class L>
__device__ void quantize_sym_block(const float* x, uint8_t* b) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < 32; ++j)
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  const float d = max / -kNmax;
  const float id = d != 0.f ? 1.f / d : 0.f;
  put_u16(b, fp16_of(d));
  uint8_t* qs = b + L::kQs;
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = min(2 * kNmax - 1, static_cast<int>(add(mul(x[j], id), kNmax + 0.5f)));
    const int q1 = min(2 * kNmax - 1, static_cast<int>(add(mul(x[j + 16], id), kNmax + 0.5f)));
    qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    h |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  if (L::kQh >= 0)
    for (int i = 0; i < 4; ++i) b[L::kQh + i] = static_cast<uint8_t>(h >> (8 * i));
}

// ggml's quantize_row_q{4,5}_1_ref (quantize_min_block): d = (max − min)/steps, m = min,
// q = trunc((x − min)/d + 0.5), Q4_1 capped at 15.
template <int kSteps, class L>
__device__ void quantize_min_block(const float* x, uint8_t* b) {
  float lo = 3.402823466e+38f, hi = -3.402823466e+38f;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  const float d = sub(hi, lo) / kSteps;
  const float id = d != 0.f ? 1.f / d : 0.f;
  put_u16(b, fp16_of(d));
  put_u16(b + 2, fp16_of(lo));
  uint8_t* qs = b + L::kQs;
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    int q0 = static_cast<int>(add(mul(sub(x[j], lo), id), 0.5f));
    int q1 = static_cast<int>(add(mul(sub(x[j + 16], lo), id), 0.5f));
    if (kSteps == 15) {
      q0 = min(15, q0);
      q1 = min(15, q1);
    }
    qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    h |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  if (L::kQh >= 0)
    for (int i = 0; i < 4; ++i) b[L::kQh + i] = static_cast<uint8_t>(h >> (8 * i));
}

__device__ __forceinline__ float iq4nl_level(int l) {
  using G = detail::Iq4nlGrid;
  const uint32_t byte = __byte_perm(l < 8 ? G::kW0 : G::kW2, l < 8 ? G::kW1 : G::kW3, l & 7) & 0xFFu;
  return static_cast<float>(static_cast<int8_t>(byte));
}

// ggml's best_index_int8(16, kvalues_iq4nl, x) (kernels/cpu/blocks.hpp iq4nl_nearest_level).
__device__ int iq4nl_nearest_level(float x) {
  if (x <= iq4nl_level(0)) return 0;
  if (x >= iq4nl_level(15)) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < iq4nl_level(mav)) mu = mav;
    else ml = mav;
  }
  return sub(x, iq4nl_level(mu - 1)) < sub(iq4nl_level(mu), x) ? mu - 1 : mu;
}

// The IQ4_NL levels of block x (ggml's quantize_row_iq4_nl_ref, one 32-value block); false (L
// untouched, d = 0) for a block of near-zeros.
__device__ bool iq4nl_levels(const float* x, uint8_t* L, float& d) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < 32; ++j)
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  d = 0.f;
  if (amax < 1e-15f) return false;
  const float id = 1.f / (max / -127.f);
  float sumqx = 0.f, sumq2 = 0.f;
  for (int j = 0; j < 32; ++j) {
    const int l = iq4nl_nearest_level(mul(id, x[j]));
    L[j] = static_cast<uint8_t>(l);
    const float q = iq4nl_level(l);
    const float w = mul(x[j], x[j]);
    sumqx = add(sumqx, mul(mul(w, q), x[j]));
    sumq2 = add(sumq2, mul(mul(w, q), q));
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  return true;
}

// Block i of the token row x: a block of near-zeros keeps the levels of the nearest earlier block
// of the row that has any (ggml carries its level array from block to block), zeros if none.
__device__ void quantize_iq4_nl_block(const float* x, int64_t i, uint8_t* b) {
  uint8_t L[32];
  float d;
  if (!iq4nl_levels(x + 32 * i, L, d)) {
    for (int j = 0; j < 32; ++j) L[j] = 0;
    float unused;
    for (int64_t k = i - 1; k >= 0; --k)
      if (iq4nl_levels(x + 32 * k, L, unused)) break;
  }
  put_u16(b, fp16_of(d));
  for (int j = 0; j < 16; ++j) b[detail::Iq4nlLayout::kQs + j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

// grid n_tokens, kStoreThreads threads, row_elems floats of dynamic shared memory: token t's row is
// staged, rotated in chunks of n_rot (0: none) and written as row_elems values of type t.
__global__ void __launch_bounds__(kStoreThreads)
    kv_store_quant_kernel(const float* src, int64_t ld_src, uint8_t* cache, GgmlType type, int64_t p0,
                          int64_t row_elems, int64_t row_bytes, int n_rot, float rot_scale) {
  FERRY_DYNAMIC_SHARED(float, x);
  const int64_t t = blockIdx.x;
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) x[e] = src[t * ld_src + e];
  if (n_rot > 0) {
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) x[e] = mul(x[e], rot_scale);
    for (int len = 1; len < n_rot; len <<= 1) {
      __syncthreads();
      // Pair p: (u, v) = (x[i], x[i + len]) with i = (p / len)·2·len + p % len; chunks of n_rot are
      // multiples of 2·len, so this is the butterfly within each chunk.
      for (int64_t p = threadIdx.x; p < row_elems / 2; p += blockDim.x) {
        const int64_t i = p / len * 2 * len + p % len;
        const float u = x[i], v = x[i + len];
        x[i] = add(u, v);
        x[i + len] = sub(u, v);
      }
    }
  }
  __syncthreads();
  uint8_t* row = cache + (p0 + t) * row_bytes;
  if (type == GgmlType::BF16) {
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
      const uint32_t u = __float_as_uint(x[e]);  // kernels' fp32_to_bf16: nearest even, quiet NaN
      const uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 64)
                                                          : static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
      put_u16(row + 2 * e, h);
    }
    return;
  }
  const int64_t block_bytes = row_bytes / (row_elems / 32);
  for (int64_t i = threadIdx.x; i < row_elems / 32; i += blockDim.x) {
    const float* xb = x + 32 * i;
    uint8_t* b = row + i * block_bytes;
    switch (type) {
      case GgmlType::Q8_0: quantize_q8_0_block(xb, b); break;
      case GgmlType::Q4_0: quantize_sym_block<8, detail::Q4_0Layout>(xb, b); break;
      case GgmlType::Q5_0: quantize_sym_block<16, detail::Q5_0Layout>(xb, b); break;
      case GgmlType::Q4_1: quantize_min_block<15, detail::Q4_1Layout>(xb, b); break;
      case GgmlType::Q5_1: quantize_min_block<31, detail::Q5_1Layout>(xb, b); break;
      case GgmlType::IQ4_NL: quantize_iq4_nl_block(x, i, b); break;
      default: break;  // refused on the host
    }
  }
}

}  // namespace

void kv_store_quantized(const float* src, int64_t ld_src, void* cache, GgmlType cache_type, int64_t p0,
                        int64_t n_tokens, int64_t row_elems, int n_rot, float rot_scale, cudaStream_t stream) {
  const char* op = "kv_store";
  require(src && cache && p0 >= 0 && ld_src >= row_elems && row_elems > 0, op, "bad arguments");
  const int64_t row_bytes = detail::kv_head_bytes(cache_type, row_elems);
  require(cache_type != GgmlType::F32 && cache_type != GgmlType::F16 && row_bytes > 0, op,
          "cache type id " + std::to_string(static_cast<unsigned>(cache_type)) +
              " (quantized path: BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)");
  require(cache_type == GgmlType::BF16 || row_elems % 32 == 0, op, "row of a block type must be whole blocks of 32");
  require(n_rot == 0 || (n_rot >= 64 && (n_rot & (n_rot - 1)) == 0 && row_elems % n_rot == 0), op,
          "rotation size must be 0 or a power of two ≥ 64 dividing the row");
  require(row_elems <= kMaxStoreRowValues, op,
          "a token row of " + std::to_string(row_elems) + " values exceeds the " + std::to_string(kMaxStoreRowValues) +
              " staged in shared memory");
  require(n_tokens <= 2147483647, op, "too many tokens");
  if (n_tokens <= 0) return;
  launch(kv_store_quant_kernel, static_cast<unsigned>(n_tokens), kStoreThreads, static_cast<size_t>(row_elems) * 4, stream,
         src, ld_src, static_cast<uint8_t*>(cache), cache_type, p0, row_elems, row_bytes, n_rot, rot_scale);
  FERRY_CUDA_CHECK_LAUNCH("kv_store_quant_kernel");
}

}  // namespace ferry::cuda
