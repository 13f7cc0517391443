#pragma once
// Device side of the integer ("q8") dot path, llama.cpp's MMVQ idea written for Ferry's layouts:
// the activation vector is quantized once to 8-bit blocks of 32, and each weight block's quants are
// unpacked with bit operations into int32 words of four int8 lanes and multiplied with `__dp4a`
// (4 MACs per instruction); float scales are applied once per 16 or 32 values. Include from .cu
// files only.
//
// Quantized activations (the caller's workspace, see matvec_q8_workspace_bytes):
//   xq   int8  (cols)         q[i] = round(x[i] / d_b) for i in block b = i / 32
//   xds  float2 (cols / 32)   (d_b, s_b): d_b = max|x| over the block / 127, s_b = d_b · Σ q
// xq comes first so its 32-byte blocks stay 16-byte aligned (two int4 loads per block); xds
// follows at byte offset cols.
//
// s_b is d·Σq (ggml's CPU block_q8_1), not Σx (ggml's CUDA quantize_q8_1): the K-quant "min"
// terms then see exactly the dequantized activations the products see, so the whole result is the
// dequantized weights times the dequantized activations up to float rounding — which is what
// tests/gpu checks with a tight bound. Σx would shave the min term's share of the quantization
// error but mixes two activation vectors in one dot.
//
// Lane units (one lane computes one unit of one row per step; consecutive lanes take neighbouring
// units, so a warp's weight reads are contiguous):
//   Q8_0        unit = 1 block (32 values)                  x blocks: u
//   Q4_K/Q5_K   unit = chunk c of block b (u = 4b + c): 64 values, sub-blocks 2c (low nibbles,
//               columns 64c..+32) and 2c+1 (high nibbles, 64c+32..+32)   x blocks: 8b+2c, 8b+2c+1
//   Q6_K        unit u = 4b + 2n + p: half n, planes p (low nibbles of ql[64n+32p..+32], qh bits
//               2p) and p+2 (high nibbles, qh bits 2p+4); columns 256b+128n+32p..+32 and +64..+32;
//               scales per 16 values                        x blocks: 8b+4n+p, 8b+4n+p+2
//   Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K: quant_q8_device_more.cuh
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/quant_device.cuh"
#include "runtime/core/types.hpp"

namespace ferry::cuda::detail {

constexpr int kQ8Block = 32;  // activation values per q8 block

// The q8 activation blocks one lane unit needs: kBlocks × 32 int8 as 8 words each, with (d, s).
template <int kBlocks>
struct Q8Frag {
  int q[kBlocks][8];
  float2 ds[kBlocks];
};

__device__ __forceinline__ void load_q8_block(const int8_t* xq, const float2* xds, int64_t ib,
                                              int (&q)[8], float2& ds) {
  const int4* p = reinterpret_cast<const int4*>(xq + ib * kQ8Block);
  const int4 a = p[0], b = p[1];
  const int4 halves[2] = {a, b};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    q[4 * h + 0] = halves[h].x;
    q[4 * h + 1] = halves[h].y;
    q[4 * h + 2] = halves[h].z;
    q[4 * h + 3] = halves[h].w;
  }
  ds = xds[ib];
}

// Per-byte q − kSub for bytes below 128 without borrows between bytes: setting each byte's top
// bit first keeps every byte ≥ 128 − kSub through the subtraction, and flipping it back yields
// (q − kSub) mod 256.
template <uint32_t kSub>
__device__ __forceinline__ uint32_t sub_bytes(uint32_t v) {
  static_assert(kSub <= 128);
  return ((v | 0x80808080u) - kSub * 0x01010101u) ^ 0x80808080u;
}

template <GgmlType T>
struct Q8Dot;

// block_q8_0: fp16 d, int8 qs[32] (34 bytes, only 2-byte aligned).
template <>
struct Q8Dot<GgmlType::Q8_0> {
  static constexpr int kValues = 32, kBlocks = 1;
  using Frag = Q8Frag<kBlocks>;
  __device__ static void load_x(int64_t u, const int8_t* xq, const float2* xds, Frag& f) {
    load_q8_block(xq, xds, u, f.q[0], f.ds[0]);
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const uint8_t* b = row + u * Unit<GgmlType::Q8_0>::kBlockBytes;
    int sumi = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      sumi = __dp4a(static_cast<int>(ld_u32_a2(b + 2 + 4 * k)), f.q[0][k], sumi);
    return fp16_bits(ld_u16(b)) * f.ds[0].x * static_cast<float>(sumi);
  }
};

// Q4_K / Q5_K block b, sub-blocks 2c and 2c+1 with integer sums lo, hi against the fragment:
// Σ_l (d·sc·q_l − dmin·m)·(d_x·qx_l) = d·sc·d_x·Σ q_l·qx_l − dmin·m·s_x per sub-block.
__device__ __forceinline__ float k4_pair_sum(const uint8_t* b, int c, int lo, int hi, const Q8Frag<2>& f) {
  int sc1, m1, sc2, m2;
  scale_min_k4(2 * c, b + 4, sc1, m1);
  scale_min_k4(2 * c + 1, b + 4, sc2, m2);
  const float d = fp16_bits(ld_u16(b)), dmin = fp16_bits(ld_u16(b + 2));
  return d * (static_cast<float>(sc1 * lo) * f.ds[0].x + static_cast<float>(sc2 * hi) * f.ds[1].x) -
         dmin * (static_cast<float>(m1) * f.ds[0].y + static_cast<float>(m2) * f.ds[1].y);
}

// block_q4_K: fp16 d, fp16 dmin, scales[12], qs[128] (144 bytes; 16-byte aligned when the row is).
template <>
struct Q8Dot<GgmlType::Q4_K> {
  static constexpr int kValues = 64, kBlocks = 2;
  using Frag = Q8Frag<kBlocks>;
  __device__ static void load_x(int64_t u, const int8_t* xq, const float2* xds, Frag& f) {
    const int64_t ib = 8 * (u >> 2) + 2 * (u & 3);
    load_q8_block(xq, xds, ib, f.q[0], f.ds[0]);
    load_q8_block(xq, xds, ib + 1, f.q[1], f.ds[1]);
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const uint8_t* b = row + (u >> 2) * Unit<GgmlType::Q4_K>::kBlockBytes;
    const int c = static_cast<int>(u & 3);
    const uint4* qs = reinterpret_cast<const uint4*>(b + 16 + 32 * c);
    const uint4 r0 = qs[0], r1 = qs[1];
    const uint32_t w[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      lo = __dp4a(static_cast<int>(w[k] & 0x0F0F0F0Fu), f.q[0][k], lo);
      hi = __dp4a(static_cast<int>((w[k] >> 4) & 0x0F0F0F0Fu), f.q[1][k], hi);
    }
    return k4_pair_sum(b, c, lo, hi, f);
  }
};

// block_q5_K: fp16 d, fp16 dmin, scales[12], qh[32], qs[128] (176 bytes); the fifth bit of value l
// of sub-block j is bit j of qh[l].
template <>
struct Q8Dot<GgmlType::Q5_K> {
  static constexpr int kValues = 64, kBlocks = 2;
  using Frag = Q8Frag<kBlocks>;
  __device__ static void load_x(int64_t u, const int8_t* xq, const float2* xds, Frag& f) {
    Q8Dot<GgmlType::Q4_K>::load_x(u, xq, xds, f);
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const uint8_t* b = row + (u >> 2) * Unit<GgmlType::Q5_K>::kBlockBytes;
    const int c = static_cast<int>(u & 3);
    const uint4* qh = reinterpret_cast<const uint4*>(b + 16);
    const uint4* qs = reinterpret_cast<const uint4*>(b + 48 + 32 * c);
    const uint4 h0 = qh[0], h1 = qh[1], r0 = qs[0], r1 = qs[1];
    const uint32_t wh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    const uint32_t wl[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
    int lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t ql = (wl[k] & 0x0F0F0F0Fu) | (((wh[k] >> (2 * c)) & 0x01010101u) << 4);
      const uint32_t qu =
          ((wl[k] >> 4) & 0x0F0F0F0Fu) | (((wh[k] >> (2 * c + 1)) & 0x01010101u) << 4);
      lo = __dp4a(static_cast<int>(ql), f.q[0][k], lo);
      hi = __dp4a(static_cast<int>(qu), f.q[1][k], hi);
    }
    return k4_pair_sum(b, c, lo, hi, f);
  }
};

// block_q6_K: ql[128], qh[64], int8 scales[16], fp16 d (210 bytes, only 2-byte aligned). Value l
// (0..31) of plane r in half n: 4 bits from ql[64n + 32(r&1) + l] (low nibble for r < 2), 2 bits
// from qh[32n + l] >> 2r, minus 32; scale scales[8n + 2r + l/16].
template <>
struct Q8Dot<GgmlType::Q6_K> {
  static constexpr int kValues = 64, kBlocks = 2;
  using Frag = Q8Frag<kBlocks>;
  __device__ static void load_x(int64_t u, const int8_t* xq, const float2* xds, Frag& f) {
    const int64_t ib = 8 * (u >> 2) + 4 * ((u >> 1) & 1) + (u & 1);  // 8b + 4n + p
    load_q8_block(xq, xds, ib, f.q[0], f.ds[0]);
    load_q8_block(xq, xds, ib + 2, f.q[1], f.ds[1]);
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const uint8_t* b = row + (u >> 2) * Unit<GgmlType::Q6_K>::kBlockBytes;
    const int n = static_cast<int>((u >> 1) & 1), p = static_cast<int>(u & 1);
    const uint8_t* ql = b + 64 * n + 32 * p;
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n + 2 * p;
    int lo[2] = {0, 0}, hi[2] = {0, 0};  // per 16 values (one scale each)
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t l = ld_u32_a2(ql + 4 * k), h = ld_u32_a2(qh + 4 * k);
      const uint32_t q_lo = sub_bytes<32>((l & 0x0F0F0F0Fu) | (((h >> (2 * p)) & 0x03030303u) << 4));
      const uint32_t q_hi =
          sub_bytes<32>(((l >> 4) & 0x0F0F0F0Fu) | (((h >> (2 * p + 4)) & 0x03030303u) << 4));
      lo[k >> 2] = __dp4a(static_cast<int>(q_lo), f.q[0][k], lo[k >> 2]);
      hi[k >> 2] = __dp4a(static_cast<int>(q_hi), f.q[1][k], hi[k >> 2]);
    }
    const int isum_lo = sc[0] * lo[0] + sc[1] * lo[1];  // plane p
    const int isum_hi = sc[4] * hi[0] + sc[5] * hi[1];  // plane p + 2
    const float d = fp16_bits(ld_u16(b + 208));
    return d * (static_cast<float>(isum_lo) * f.ds[0].x + static_cast<float>(isum_hi) * f.ds[1].x);
  }
};

}  // namespace ferry::cuda::detail

#include "kernels/cuda/quant_q8_device_more.cuh"  // IWYU pragma: export

// FERRY_Q8_DOT_TYPE_CASES(CODE): one FERRY_TYPE_CASE per type with an integer dot.
// FERRY_DISPATCH_Q8_DOT_TYPE(t, op, CODE): CODE with `constexpr GgmlType kT` for those types; any
// other type throws unsupported naming op.
// clang-format off
#define FERRY_Q8_DOT_TYPE_CASES(...)                                                              \
  FERRY_TYPE_CASE(Q8_0, __VA_ARGS__) FERRY_TYPE_CASE(Q4_K, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q5_K, __VA_ARGS__) FERRY_TYPE_CASE(Q6_K, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q4_0, __VA_ARGS__) FERRY_TYPE_CASE(Q4_1, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q5_0, __VA_ARGS__) FERRY_TYPE_CASE(Q5_1, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q2_K, __VA_ARGS__) FERRY_TYPE_CASE(Q3_K, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(IQ4_NL, __VA_ARGS__) FERRY_TYPE_CASE(IQ4_XS, __VA_ARGS__)                      \
  FERRY_TYPE_CASE(MXFP4, __VA_ARGS__)
#define FERRY_Q8_DOT_TYPE_NAMES "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4"
#define FERRY_DISPATCH_Q8_DOT_TYPE(t, op, ...)                                                    \
  switch (t) {                                                                                   \
    FERRY_Q8_DOT_TYPE_CASES(__VA_ARGS__)                                                         \
    default: ::ferry::cuda::detail::throw_no_kernel(t, op, "has no integer dot (" FERRY_Q8_DOT_TYPE_NAMES ")"); \
  }
// clang-format on
