#pragma once
// Q8Dot (quant_q8_device.cuh) of Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q2_K and Q3_K.
// Included by quant_q8_device.cuh after its helpers; include that header, not this one.
//
// Every lane unit here is 32 values = one q8 activation block (x block u):
//   32-value block types  unit = block u: levels of qs bytes 0..15 (low nibbles: values 0..15,
//                         high: 16..31), Unit32::levels; grid types (IQ4_NL, MXFP4) as int8 levels
//                         from their 16-entry tables, the others as 0..31 with the offset or min
//                         applied through s_x = d_x·Σq_x
//   IQ4_XS                unit u = sub-block u%8 of block u/8 (an IQ4_NL block with its own scale)
//   Q2_K/Q3_K             unit u = 8b + 4n + r: bits 2r..2r+1 of qs[32n..+32] of block b, i.e.
//                         values 128n + 32r..+32; sub-blocks (scales) 8n + 2r and 8n + 2r + 1
#include <cstdint>

namespace ferry::cuda::detail {

// Σ_l level_l·q_x[l] over a 32-value unit: lo[k] holds the levels of values 4k..4k+3 (k < 4) and
// hi[k] of 16 + 4k..; as int32 sums over the first and the second 16 values.
__device__ __forceinline__ int2 dp4a_halves(const uint32_t (&lo)[4], const uint32_t (&hi)[4],
                                            const Q8Frag<1>& f) {
  int a = 0, b = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    a = __dp4a(static_cast<int>(lo[k]), f.q[0][k], a);
    b = __dp4a(static_cast<int>(hi[k]), f.q[0][4 + k], b);
  }
  return int2{a, b};
}

// The 32 levels of a nibble block as lo/hi words (see dp4a_halves), from the two float units.
template <class Levels>
__device__ __forceinline__ void block_levels(Levels&& levels, uint32_t (&lo)[4],
                                             uint32_t (&hi)[4]) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    uint32_t l[2], h[2];
    levels(p, l, h);
    lo[2 * p] = l[0];
    lo[2 * p + 1] = l[1];
    hi[2 * p] = h[0];
    hi[2 * p + 1] = h[1];
  }
}

// Lane unit = one q8 activation block (x block u).
struct Q8Unit32 {
  static constexpr int kValues = 32, kBlocks = 1;
  using Frag = Q8Frag<kBlocks>;
  __device__ static void load_x(int64_t u, const int8_t* xq, const float2* xds, Frag& f) {
    load_q8_block(xq, xds, u, f.q[0], f.ds[0]);
  }
};

// Σ (d·(q − off))·(d_x·q_x) = d·(d_x·Σ q·q_x − off·s_x); Σ (d·q + m)·(d_x·q_x) = d·d_x·Σ q·q_x +
// m·s_x; Σ d·grid[q]·d_x·q_x = d·d_x·Σ grid[q]·q_x.
template <class L>
struct Q8Dot32 : Q8Unit32 {
  using U = Unit32<L>;
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const uint8_t* b = row + u * U::kBlockBytes;
    uint32_t lo[4], hi[4];
    block_levels([&](int p, uint32_t(&l)[2], uint32_t(&h)[2]) { U::levels(b, p, l, h); }, lo, hi);
    const int2 s = dp4a_halves(lo, hi, f);
    const float sumi = static_cast<float>(s.x + s.y);
    const float2 dm = L::scale(b);
    if constexpr (L::kMap == LevelMap::offset)
      return dm.x * (f.ds[0].x * sumi - static_cast<float>(L::kOffset) * f.ds[0].y);
    else if constexpr (L::kMap == LevelMap::affine)
      return dm.x * f.ds[0].x * sumi + dm.y * f.ds[0].y;
    else
      return dm.x * f.ds[0].x * sumi;
  }
};

template <>
struct Q8Dot<GgmlType::Q4_0> : Q8Dot32<Q4_0Layout> {};
template <>
struct Q8Dot<GgmlType::Q4_1> : Q8Dot32<Q4_1Layout> {};
template <>
struct Q8Dot<GgmlType::Q5_0> : Q8Dot32<Q5_0Layout> {};
template <>
struct Q8Dot<GgmlType::Q5_1> : Q8Dot32<Q5_1Layout> {};
template <>
struct Q8Dot<GgmlType::IQ4_NL> : Q8Dot32<Iq4nlLayout> {};
template <>
struct Q8Dot<GgmlType::MXFP4> : Q8Dot32<Mxfp4Layout> {};

template <>
struct Q8Dot<GgmlType::IQ4_XS> : Q8Unit32 {
  using U = Unit<GgmlType::IQ4_XS>;
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const uint8_t* b = row + (u >> 3) * U::kBlockBytes;
    const int s = static_cast<int>(u & 7);
    uint32_t lo[4], hi[4];
    block_levels(
        [&](int p, uint32_t(&l)[2], uint32_t(&h)[2]) {
          nibble_levels<Iq4nlLayout, 8>(b + 8 + 16 * s, 0, p, l, h);
        },
        lo, hi);
    const int2 si = dp4a_halves(lo, hi, f);
    return fp16_bits(ld_u16(b)) * f.ds[0].x *
           static_cast<float>(U::sub_scale(b, s) * (si.x + si.y));
  }
};

// Q2_K / Q3_K unit u: the block, half n, plane r, and the levels of the plane's 32 values (lo: the
// first 16, sub-block 8n + 2r; hi: the second 16, sub-block 8n + 2r + 1) from `level(k)`, word k.
struct K2Unit {
  int64_t block;
  int n, r;
  __device__ explicit K2Unit(int64_t u)
      : block(u >> 3), n(static_cast<int>((u >> 2) & 1)), r(static_cast<int>(u & 3)) {}
  template <class Level>
  __device__ void levels(Level&& level, uint32_t (&lo)[4], uint32_t (&hi)[4]) const {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = level(k);
      hi[k] = level(4 + k);
    }
  }
};

// Σ (d·sc·q − dmin·m)·d_x·q_x = d_x·(d·Σ sc·Σq·q_x − dmin·Σ m·Σq_x) per 16 values; Σ m·q_x as a
// __dp4a with m in every byte.
template <>
struct Q8Dot<GgmlType::Q2_K> : Q8Unit32 {
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const K2Unit k2(u);
    const uint8_t* b = row + k2.block * Unit<GgmlType::Q2_K>::kBlockBytes;
    const uint8_t* qs = b + 16 + 32 * k2.n;
    uint32_t lo[4], hi[4];
    k2.levels([&](int k) { return (ld_u32<4>(qs + 4 * k) >> (2 * k2.r)) & 0x03030303u; }, lo, hi);
    const int2 s = dp4a_halves(lo, hi, f);
    const int sc0 = b[8 * k2.n + 2 * k2.r], sc1 = b[8 * k2.n + 2 * k2.r + 1];
    int mins = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      mins = __dp4a((sc0 >> 4) * 0x01010101, f.q[0][k], mins);
      mins = __dp4a((sc1 >> 4) * 0x01010101, f.q[0][4 + k], mins);
    }
    const float d = fp16_bits(ld_u16(b + 80)), dmin = fp16_bits(ld_u16(b + 82));
    return f.ds[0].x * (d * static_cast<float>((sc0 & 0xF) * s.x + (sc1 & 0xF) * s.y) -
                        dmin * static_cast<float>(mins));
  }
};

// q = (2 bits | hbit << 2) − 4 ∈ −4..3 per byte (sub_bytes), scales 6-bit − 32.
template <>
struct Q8Dot<GgmlType::Q3_K> : Q8Unit32 {
  using U = Unit<GgmlType::Q3_K>;
  __device__ static float dot(const uint8_t* row, int64_t u, const Frag& f) {
    const K2Unit k2(u);
    const uint8_t* b = row + k2.block * U::kBlockBytes;
    const uint8_t* qs = b + 32 + 32 * k2.n;
    uint32_t lo[4], hi[4];
    k2.levels(
        [&](int k) {
          return sub_bytes<4>(U::levels(ld_u32_a2(qs + 4 * k), ld_u32_a2(b + 4 * k), k2.n, k2.r));
        },
        lo, hi);
    const int2 s = dp4a_halves(lo, hi, f);
    const int j = 8 * k2.n + 2 * k2.r;
    const int isum = q3k_scale(b + 96, j) * s.x + q3k_scale(b + 96, j + 1) * s.y;
    return fp16_bits(ld_u16(b + 108)) * f.ds[0].x * static_cast<float>(isum);
  }
};

}  // namespace ferry::cuda::detail
