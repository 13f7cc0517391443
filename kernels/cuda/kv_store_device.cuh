#pragma once
// Device side of the KV cache store (include from .cu files only): the quantize-on-write of one
// token row of BF16 or a 32-value block type, with the Hadamard rotation of quantized caches, as
// kernels/cpu's quantize_row_cpu does it — the same float operations in the same order, through
// mul/add/sub so that nvcc cannot contract them into FMAs. Shared by kv_store.cu (the store) and
// attention_prep.cu (the fused q/k norm + RoPE + store), so both write the same bytes.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/kv_quant_device.cuh"
#include "kernels/cuda/quant_device.cuh"
#include "runtime/core/types.hpp"

namespace ferry::cuda::detail {

// A token row (n_head_kv·head_dim values) is staged in shared memory, rotated and quantized there.
constexpr int64_t kMaxStoreRowValues = 48 * 1024 / 4;

// Host side (kv_store.cu): checks a quantized row store's arguments — a type kv_store_row takes,
// whole 32-value blocks, a rotation of 0 or a power of two ≥ 64 dividing the row, a row that fits
// the shared memory — and returns the bytes of one row of `type`; throws naming `op`.
int64_t check_kv_store_row(const char* op, GgmlType type, int64_t row_elems, int n_rot);

__device__ __forceinline__ uint16_t fp16_of(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// ggml-cpu's x86 quantize_row_q8_0 (kernels/cpu/activation.cpp: 127/amax, half to even).
__device__ inline void quantize_q8_0_block(const float* x, uint8_t* b) {
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
__device__ inline void quantize_sym_block(const float* x, uint8_t* b) {
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
__device__ inline void quantize_min_block(const float* x, uint8_t* b) {
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
  using G = Iq4nlGrid;
  const uint32_t byte = __byte_perm(l < 8 ? G::kW0 : G::kW2, l < 8 ? G::kW1 : G::kW3, l & 7) & 0xFFu;
  return static_cast<float>(static_cast<int8_t>(byte));
}

// ggml's best_index_int8(16, kvalues_iq4nl, x) (kernels/cpu/blocks.hpp iq4nl_nearest_level).
__device__ inline int iq4nl_nearest_level(float x) {
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
__device__ inline bool iq4nl_levels(const float* x, uint8_t* L, float& d) {
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
__device__ inline void quantize_iq4_nl_block(const float* x, int64_t i, uint8_t* b) {
  uint8_t L[32];
  float d;
  if (!iq4nl_levels(x + 32 * i, L, d)) {
    for (int j = 0; j < 32; ++j) L[j] = 0;
    float unused;
    for (int64_t k = i - 1; k >= 0; --k)
      if (iq4nl_levels(x + 32 * k, L, unused)) break;
  }
  put_u16(b, fp16_of(d));
  for (int j = 0; j < 16; ++j) b[Iq4nlLayout::kQs + j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

// The block's threads store one token row: src (row_elems floats) is staged in x (row_elems floats
// of shared memory), rotated there in chunks of n_rot values (0: none; every value × rot_scale
// first) and written to `row` as row_elems values of `type` (BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL; row_bytes of them). Any block size: each butterfly stage and each 32-value block is
// computed by one thread whatever the partition. Every thread of the block must call it.
__device__ inline void kv_store_row(const float* src, float* x, int64_t row_elems, uint8_t* row, GgmlType type,
                                    int64_t row_bytes, int n_rot, float rot_scale) {
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) x[e] = src[e];
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
      case GgmlType::Q4_0: quantize_sym_block<8, Q4_0Layout>(xb, b); break;
      case GgmlType::Q5_0: quantize_sym_block<16, Q5_0Layout>(xb, b); break;
      case GgmlType::Q4_1: quantize_min_block<15, Q4_1Layout>(xb, b); break;
      case GgmlType::Q5_1: quantize_min_block<31, Q5_1Layout>(xb, b); break;
      case GgmlType::IQ4_NL: quantize_iq4_nl_block(x, i, b); break;
      default: break;  // refused on the host
    }
  }
}

}  // namespace ferry::cuda::detail
