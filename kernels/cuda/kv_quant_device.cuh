#pragma once
// Device side of the quantized KV cache (include from .cu files only):
// one value of a cache head row of any KV type, the Walsh-Hadamard rotation on a warp's registers,
// and the query rounding of llama.cpp's CPU flash attention.
//
// A head row of head_dim values of a 32-value block type is head_dim/32 whole blocks (ggml's
// block_*), so value d is value d % 32 of block d / 32. The block layouts and the level maps are
// quant_device_more.cuh's (Q4_0Layout, ...): values come out bit-exact with ggml's dequantize_row_*.
#include <cstdint>

#include "kernels/cuda/quant_device.cuh"
#include "runtime/core/types.hpp"

namespace ferry::cuda::detail {

// Value e (0..31) of one 32-value block of layout L: byte e % 16 of qs, low nibble for e < 16,
// the fifth bit from bit e of qh, the grid level for IQ4_NL.
template <class L>
__device__ __forceinline__ float kv_block_value(const uint8_t* b, int e) {
  uint32_t q = (b[L::kQs + (e & 15)] >> (e & 16 ? 4 : 0)) & 0xFu;
  if constexpr (L::kQh >= 0) q |= ((b[L::kQh + (e >> 3)] >> (e & 7)) & 1u) << 4;
  if constexpr (L::kMap == LevelMap::grid) {
    using G = typename L::Grid;
    q = __byte_perm(q < 8 ? G::kW0 : G::kW2, q < 8 ? G::kW1 : G::kW3, q & 7) & 0xFFu;
  }
  return level_value<L>(L::scale(b), q);
}

// Value d of a head row of type t (one of the nine KV cache types; the type is uniform across a
// warp, so the switch does not diverge).
__device__ __forceinline__ float kv_value(GgmlType t, const uint8_t* row, int d) {
  const int e = d & 31;
  switch (t) {
    case GgmlType::F32: return reinterpret_cast<const float*>(row)[d];
    case GgmlType::F16: return fp16_bits(ld_u16(row + 2 * d));
    case GgmlType::BF16: return bf16_bits(ld_u16(row + 2 * d));
    case GgmlType::Q8_0: {  // block_q8_0: fp16 d, int8 qs[32]
      const uint8_t* b = row + (d >> 5) * Unit<GgmlType::Q8_0>::kBlockBytes;
      return mul(static_cast<float>(static_cast<int8_t>(b[2 + e])), fp16_bits(ld_u16(b)));
    }
    case GgmlType::Q4_0: return kv_block_value<Q4_0Layout>(row + (d >> 5) * Q4_0Layout::kBytes, e);
    case GgmlType::Q4_1: return kv_block_value<Q4_1Layout>(row + (d >> 5) * Q4_1Layout::kBytes, e);
    case GgmlType::Q5_0: return kv_block_value<Q5_0Layout>(row + (d >> 5) * Q5_0Layout::kBytes, e);
    case GgmlType::Q5_1: return kv_block_value<Q5_1Layout>(row + (d >> 5) * Q5_1Layout::kBytes, e);
    case GgmlType::IQ4_NL: return kv_block_value<Iq4nlLayout>(row + (d >> 5) * Iq4nlLayout::kBytes, e);
    default: return 0.f;  // refused on the host (check_args)
  }
}

// Bytes of one head row of head_dim values of KV type t (0 for a type outside the nine).
__host__ __device__ constexpr int64_t kv_head_bytes(GgmlType t, int64_t head_dim) {
  switch (t) {
    case GgmlType::F32: return 4 * head_dim;
    case GgmlType::F16:
    case GgmlType::BF16: return 2 * head_dim;
    case GgmlType::Q8_0: return head_dim / 32 * Unit<GgmlType::Q8_0>::kBlockBytes;
    case GgmlType::Q4_0: return head_dim / 32 * Q4_0Layout::kBytes;
    case GgmlType::IQ4_NL: return head_dim / 32 * Iq4nlLayout::kBytes;
    case GgmlType::Q4_1: return head_dim / 32 * Q4_1Layout::kBytes;
    case GgmlType::Q5_0: return head_dim / 32 * Q5_0Layout::kBytes;
    case GgmlType::Q5_1: return head_dim / 32 * Q5_1Layout::kBytes;
    default: return 0;
  }
}

// x ← H_n·x for each chunk of n values (n ∈ {64, 128, 256}, a divisor of 32·M) of a vector held by
// a warp as x[m] = value lane + 32m: the same float operations in the same order as
// kernels/cpu/hadamard.cpp (scale first, then butterflies of lengths 1, 2, 4, ...), so the result
// is bit-identical with the CPU's. Lengths < 32 pair lanes (shuffles), longer ones pair registers.
template <int M>
__device__ __forceinline__ void warp_hadamard(float (&x)[M], int n, float scale, int lane) {
#pragma unroll
  for (int m = 0; m < M; ++m) x[m] = mul(x[m], scale);
#pragma unroll
  for (int len = 1; len < 32; len <<= 1) {
    const bool upper = lane & len;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float other = __shfl_xor_sync(0xffffffffu, x[m], len);
      x[m] = upper ? sub(other, x[m]) : add(x[m], other);  // (u + v, u − v): u is the lower lane
    }
  }
  // Unrolled over the compile-time register distances so that x stays in registers.
#pragma unroll
  for (int len = 1; len < M; len <<= 1) {
    if (32 * len >= n) break;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (m & len) continue;  // m + len < M: bit len of m is clear and len < M
      const float u = x[m], v = x[m + len];
      x[m] = add(u, v);
      x[m + len] = sub(u, v);
    }
  }
}

// Q4_1 and Q5_1 K blocks (d·q + m) are dotted by ggml against Q8_1 query blocks as
// d·d_q·Σq_k·q_q + m·s with s = F16(d_q·Σq_q) from the unrounded d_q.
__device__ __forceinline__ bool kv_affine(GgmlType t) { return t == GgmlType::Q4_1 || t == GgmlType::Q5_1; }

// The min m of block b of a Q4_1/Q5_1 head row (both layouts: fp16 d, fp16 m first).
__device__ __forceinline__ float kv_block_min(GgmlType t, const uint8_t* row, int b) {
  const int bytes = t == GgmlType::Q4_1 ? Q4_1Layout::kBytes : Q5_1Layout::kBytes;
  return fp16_bits(ld_u16(row + b * bytes + 2));
}

// The query as llama.cpp's CPU flash attention dots it with a K cache of type t: converted to
// vec_dot_type(t) (ggml-cpu's x86 from_float) and read back. F32 unchanged; F16 and BF16 rounded
// to nearest even; the 32-value types quantized to Q8_0 / Q8_1 blocks (d = amax/127 stored as F16,
// q = rint(x·127/amax), half to even) whose values are d16·q. Block m of the warp's vector is x[m]
// over the 32 lanes. For Q4_1/Q5_1 K, sum_fix[m] = s − d16·Σq of block m: dotting the read-back
// values with a dequantized K block gives d·d16·Σq_k·q + m·d16·Σq, and adding m·sum_fix[m] turns
// the min term into ggml's m·s.
template <int M>
__device__ __forceinline__ void round_query_like_cpu(float (&x)[M], GgmlType t, float (&sum_fix)[M]) {
#pragma unroll
  for (int m = 0; m < M; ++m) sum_fix[m] = 0.f;
  if (t == GgmlType::F32) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (t == GgmlType::F16) {
      x[m] = __half2float(__float2half_rn(x[m]));
    } else if (t == GgmlType::BF16) {
      const uint32_t u = __float_as_uint(x[m]);
      x[m] = __uint_as_float(((u + (0x7fffu + ((u >> 16) & 1u))) >> 16) << 16);
    } else {
      const float amax = warp_max(fabsf(x[m]));
      const float d = amax / 127.f;
      const float d16 = __half2float(__float2half_rn(d));
      const float id = amax != 0.f ? 127.f / amax : 0.f;
      const float q = rintf(mul(x[m], id));
      x[m] = mul(q, d16);
      if (kv_affine(t)) {
        const float sum_q = warp_sum(q);  // integers below 2^12: exact in any order
        sum_fix[m] = sub(__half2float(__float2half_rn(mul(d, sum_q))), mul(d16, sum_q));
      }
    }
  }
}

}  // namespace ferry::cuda::detail
