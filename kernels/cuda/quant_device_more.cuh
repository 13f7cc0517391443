#pragma once
// Units (see quant_device.cuh) of Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q2_K and Q3_K.
// Included by quant_device.cuh after its helpers; include that header, not this one.
//
//   32-value blocks (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): byte j of qs holds value j (low
//     nibble) and value j + 16 (high nibble), so unit u = 2b + p takes qs bytes 8p..8p+8 of block
//     b: columns 32b + 8p..+8 (low nibbles) and 32b + 16 + 8p..+8 (high nibbles), 2 runs of 8
//   IQ4_XS  8 sub-blocks of 32 values laid out as IQ4_NL blocks: the same units (16 per block)
//   Q2_K/Q3_K  as Q6_K: unit t of a block covers half n = t/8, l0 = 4(t%8): columns
//     128n + l0 + 32r .. +4 for r = 0..3 (bits 2r..2r+1 of qs[32n + l0..+4])
// Decoding is bit-exact with ggml's dequantize_row_* (kernels/cpu/dequant_ref.cpp): the same
// products and sums in the same order, through mul/sub/add so nvcc cannot fuse them.
#include <cstdint>
#include <type_traits>

namespace ferry::cuda::detail {

__device__ __forceinline__ float add(float a, float b) {
  return __fadd_rn(a, b);
}

// Alignment every block of a row has (rows start 16-byte aligned): the largest power of two
// dividing the block size, capped at 16.
constexpr int block_align(int bytes) {
  return (bytes & -bytes) < 16 ? (bytes & -bytes) : 16;
}

// 32-bit load from a kAlign-byte aligned address.
template <int kAlign>
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  if constexpr (kAlign >= 4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (kAlign == 2) {
    return ld_u32_a2(p);
  } else {
    return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
  }
}

// Bits 0..3 of n → bit 0 of bytes 0..3 (the four shifted copies of n do not overlap, so the product
// is their OR).
__device__ __forceinline__ uint32_t spread4(uint32_t n) {
  return (n * 0x00204081u) & 0x01010101u;
}

// Non-uniform 4-bit grids: 16 int8 levels as four little-endian words (ggml's kvalues_iq4nl and
// kvalues_mxfp4, kernels/cpu/blocks.hpp; the bit-exact dequantize test checks every level).
struct Iq4nlGrid {
  static constexpr uint32_t kW0 = 0xBFAD9881u, kW1 = 0xF6EADDCFu, kW2 = 0x26190D01u,
                            kW3 = 0x71594535u;
};
struct Mxfp4Grid {  // e2m1 values doubled: 0, 1, 2, 3, 4, 6, 8, 12, then negated
  static constexpr uint32_t kW0 = 0x03020100u, kW1 = 0x0C080604u, kW2 = 0xFDFEFF00u,
                            kW3 = 0xF4F8FAFCu;
};

// The grid levels of the 8 nibbles of q (byte k: low nibble = value k, high nibble = value k + 16
// of the layout above): .x = levels of the low nibbles of bytes 0..3, .y = of the high ones, as
// int8 lanes. Byte permutes (llama.cpp's get_int_from_table_16): levels 0..7 from words 0/1, 8..15
// from 2/3, nibble bit 3 picks between them.
template <class G>
__device__ __forceinline__ uint2 grid_lookup(uint32_t q) {
  const uint32_t pick = 0x32103210u | ((q & 0x88888888u) >> 1);
  uint32_t t[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t sel = (q >> (16 * i)) & 0x7777u;
    const uint32_t lo = __byte_perm(G::kW0, G::kW1, sel), hi = __byte_perm(G::kW2, G::kW3, sel);
    t[i] = __byte_perm(lo, hi, (pick >> (16 * i)) & 0xFFFFu);
  }
  return uint2{__byte_perm(t[0], t[1], 0x6420u), __byte_perm(t[0], t[1], 0x7531u)};
}

// How a 32-value block maps a level q to a value: d·(q − kOffset); d·q + m; d·grid[q].
enum class LevelMap { offset, affine, grid };

// Block layouts (ggml's block_*): kQs, kQh byte offsets of qs and of the 32-bit fifth-bit mask
// (−1: none); scale() returns (d, m).
struct Q4_0Layout {  // fp16 d, qs[16]: d·(q − 8)
  static constexpr int kBytes = 18, kQs = 2, kQh = -1, kOffset = 8;
  static constexpr LevelMap kMap = LevelMap::offset;
  __device__ static float2 scale(const uint8_t* b) { return float2{fp16_bits(ld_u16(b)), 0.f}; }
};
struct Q4_1Layout {  // fp16 d, fp16 m, qs[16]: d·q + m
  static constexpr int kBytes = 20, kQs = 4, kQh = -1, kOffset = 0;
  static constexpr LevelMap kMap = LevelMap::affine;
  __device__ static float2 scale(const uint8_t* b) {
    return float2{fp16_bits(ld_u16(b)), fp16_bits(ld_u16(b + 2))};
  }
};
struct Q5_0Layout {  // fp16 d, qh[4], qs[16]: d·(q − 16), bit j of qh is the fifth bit of value j
  static constexpr int kBytes = 22, kQs = 6, kQh = 2, kOffset = 16;
  static constexpr LevelMap kMap = LevelMap::offset;
  __device__ static float2 scale(const uint8_t* b) { return Q4_0Layout::scale(b); }
};
struct Q5_1Layout {  // fp16 d, fp16 m, qh[4], qs[16]: d·q + m
  static constexpr int kBytes = 24, kQs = 8, kQh = 4, kOffset = 0;
  static constexpr LevelMap kMap = LevelMap::affine;
  __device__ static float2 scale(const uint8_t* b) { return Q4_1Layout::scale(b); }
};
struct Iq4nlLayout {  // fp16 d, qs[16]: d·grid[q]
  static constexpr int kBytes = 18, kQs = 2, kQh = -1, kOffset = 0;
  static constexpr LevelMap kMap = LevelMap::grid;
  using Grid = Iq4nlGrid;
  __device__ static float2 scale(const uint8_t* b) { return Q4_0Layout::scale(b); }
};
// E8M0 exponent e, qs[16]: grid[q]·2^(e − 128), half the OCP scale because the grid is doubled
// (ggml's e8m0_to_fp32_half: e < 2 gives the subnormals 2^-128, 2^-127).
struct Mxfp4Layout {
  static constexpr int kBytes = 17, kQs = 1, kQh = -1, kOffset = 0;
  static constexpr LevelMap kMap = LevelMap::grid;
  using Grid = Mxfp4Grid;
  __device__ static float2 scale(const uint8_t* b) {
    const uint32_t e = b[0];
    return float2{__uint_as_float(e < 2 ? 0x00200000u << e : (e - 1u) << 23), 0.f};
  }
};

// The 16 levels of qs bytes 8p..8p+8 (qs kAlign-byte aligned) as int8x4 words: lo[i] = values
// 8p + 4i..+4, hi[i] = values 16 + 8p + 4i..+4. Grid layouts give the grid levels, the others
// the level q (0..31) with the fifth bit from qh (the block's 32-bit mask) when kQh ≥ 0.
template <class L, int kAlign>
__device__ __forceinline__ void nibble_levels(const uint8_t* qs, uint32_t qh, int p,
                                              uint32_t (&lo)[2], uint32_t (&hi)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t w = ld_u32<kAlign>(qs + 8 * p + 4 * i);
    if constexpr (L::kMap == LevelMap::grid) {
      const uint2 g = grid_lookup<typename L::Grid>(w);
      lo[i] = g.x;
      hi[i] = g.y;
    } else {
      lo[i] = w & 0x0F0F0F0Fu;
      hi[i] = (w >> 4) & 0x0F0F0F0Fu;
      if constexpr (L::kQh >= 0) {
        lo[i] |= spread4((qh >> (8 * p + 4 * i)) & 0xF) << 4;
        hi[i] |= spread4((qh >> (16 + 8 * p + 4 * i)) & 0xF) << 4;
      }
    }
  }
}

template <class L>
__device__ __forceinline__ float level_value(float2 s, uint32_t byte) {
  if constexpr (L::kMap == LevelMap::offset)
    return mul(static_cast<float>(static_cast<int>(byte) - L::kOffset), s.x);
  else if constexpr (L::kMap == LevelMap::affine)
    return add(mul(static_cast<float>(byte), s.x), s.y);
  else
    return mul(s.x, static_cast<float>(static_cast<int8_t>(byte)));
}

// The 16 values of a unit from its level words (runs: lo then hi) and block scale s.
template <class L>
__device__ __forceinline__ void nibble_values(float2 s, const uint32_t (&lo)[2],
                                              const uint32_t (&hi)[2], float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[i] = level_value<L>(s, (lo[i >> 2] >> (8 * (i & 3))) & 0xFF);
    v[8 + i] = level_value<L>(s, (hi[i >> 2] >> (8 * (i & 3))) & 0xFF);
  }
}

// Σ level·x over a unit's two runs of 8 (xa, xb) with level words lo, hi, and Σx into sx: the
// levels turned to floats by byte_to_float (int8 grid levels flipped to byte − 128 first).
template <class L>
__device__ __forceinline__ float nibble_dot(const uint32_t (&lo)[2], const uint32_t (&hi)[2],
                                            const float4* xa, const float4* xb, float& sx) {
  constexpr uint32_t kFlip = L::kMap == LevelMap::grid ? 0x80808080u : 0u;
  constexpr float kBias =
      kMagic + (L::kMap == LevelMap::grid ? 128.f : static_cast<float>(L::kOffset));
  float s = 0.f;
  sx = 0.f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float4 a = xa[i], b = xb[i];
    s += dot4(lo[i] ^ kFlip, a, kBias) + dot4(hi[i] ^ kFlip, b, kBias);
    if constexpr (L::kMap == LevelMap::affine) sx += sum4(a) + sum4(b);
  }
  return s;
}

// Units of the 32-value block types; dot() is the fast unit_dot.
template <class L>
struct Unit32 {
  static constexpr int kBlockValues = 32, kBlockBytes = L::kBytes;
  static constexpr int kValues = 16, kRuns = 2, kRunLen = 8;
  static constexpr int kAlign = block_align(L::kBytes);
  __device__ static int run_start(int64_t u, int r) {
    return static_cast<int>((u >> 1) * 32 + 8 * (u & 1) + 16 * r);
  }
  __device__ static void levels(const uint8_t* b, int p, uint32_t (&lo)[2], uint32_t (&hi)[2]) {
    uint32_t qh = 0;
    if constexpr (L::kQh >= 0) qh = ld_u32<kAlign>(b + L::kQh);
    nibble_levels<L, kAlign>(b + L::kQs, qh, p, lo, hi);
  }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 1) * kBlockBytes;
    uint32_t lo[2], hi[2];
    levels(b, static_cast<int>(u & 1), lo, hi);
    nibble_values<L>(L::scale(b), lo, hi, v);
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const float* x) {
    const uint8_t* b = row + (u >> 1) * kBlockBytes;
    uint32_t lo[2], hi[2];
    levels(b, static_cast<int>(u & 1), lo, hi);
    const float2 s = L::scale(b);
    float sx;
    const float q = nibble_dot<L>(lo, hi, reinterpret_cast<const float4*>(x + run_start(u, 0)),
                                  reinterpret_cast<const float4*>(x + run_start(u, 1)), sx);
    if constexpr (L::kMap == LevelMap::affine)
      return s.x * q + s.y * sx;
    else
      return s.x * q;
  }
};

template <>
struct Unit<GgmlType::Q4_0> : Unit32<Q4_0Layout> {};
template <>
struct Unit<GgmlType::Q4_1> : Unit32<Q4_1Layout> {};
template <>
struct Unit<GgmlType::Q5_0> : Unit32<Q5_0Layout> {};
template <>
struct Unit<GgmlType::Q5_1> : Unit32<Q5_1Layout> {};
template <>
struct Unit<GgmlType::IQ4_NL> : Unit32<Iq4nlLayout> {};
template <>
struct Unit<GgmlType::MXFP4> : Unit32<Mxfp4Layout> {};

// block_iq4_xs: fp16 d, u16 scales_h, scales_l[4], qs[128] (136 bytes, 8-byte aligned). Sub-block s
// (32 values, qs[16s..]) has scale d·(ls − 32), ls = 4 bits of scales_l[s/2] | 2 bits of scales_h.
template <>
struct Unit<GgmlType::IQ4_XS> {
  static constexpr int kBlockValues = 256, kBlockBytes = 136;
  static constexpr int kValues = 16, kRuns = 2, kRunLen = 8;
  __device__ static int run_start(int64_t u, int r) { return Unit32<Iq4nlLayout>::run_start(u, r); }
  __device__ static int sub_scale(const uint8_t* b, int s) {
    return (((b[4 + s / 2] >> (4 * (s & 1))) & 0xF) | (((ld_u16(b + 2) >> (2 * s)) & 3) << 4)) - 32;
  }
  // Block, sub-block scale d·(ls − 32) and level words of unit u.
  __device__ static float levels(const uint8_t* row, int64_t u, uint32_t (&lo)[2],
                                 uint32_t (&hi)[2]) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int s = static_cast<int>(u & 15) >> 1;
    nibble_levels<Iq4nlLayout, 8>(b + 8 + 16 * s, 0, static_cast<int>(u & 1), lo, hi);
    return mul(fp16_bits(ld_u16(b)), static_cast<float>(sub_scale(b, s)));
  }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    uint32_t lo[2], hi[2];
    const float dl = levels(row, u, lo, hi);
    nibble_values<Iq4nlLayout>(float2{dl, 0.f}, lo, hi, v);
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const float* x) {
    uint32_t lo[2], hi[2];
    const float dl = levels(row, u, lo, hi);
    float sx;
    return dl * nibble_dot<Iq4nlLayout>(lo, hi,
                                        reinterpret_cast<const float4*>(x + run_start(u, 0)),
                                        reinterpret_cast<const float4*>(x + run_start(u, 1)), sx);
  }
};

// The 6-bit scale j (0..15) of a Q3_K block minus 32, from its 12 packed bytes: low 4 bits in
// byte j (j < 8, low nibble) or j − 8 (high nibble), high 2 bits at bits 2(j/4) of byte 8 + j%4.
__device__ __forceinline__ int q3k_scale(const uint8_t* s12, int j) {
  const int lo = j < 8 ? s12[j] & 0xF : s12[j - 8] >> 4;
  return (lo | (((s12[8 + (j & 3)] >> (2 * (j >> 2))) & 3) << 4)) - 32;
}

// block_q2_K: scales[16] (scale low nibble, min high nibble, per 16 values), qs[64], fp16 d,
// fp16 dmin (84 bytes, 4-byte aligned): d·sc·q − dmin·m. Run r of a unit is sub-block
// 8n + 2r + l0/16, at scales[8n + l0/16 + 2r].
template <>
struct Unit<GgmlType::Q2_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 84;
  static constexpr int kValues = 16, kRuns = 4, kRunLen = 4;
  __device__ static int run_start(int64_t u, int r) {
    return Unit<GgmlType::Q6_K>::run_start(u, r);
  }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), n = t >> 3, l0 = 4 * (t & 7);
    const uint32_t q = ld_u32<4>(b + 16 + 32 * n + l0);
    const uint8_t* sc = b + 8 * n + l0 / 16;
    const float d = fp16_bits(ld_u16(b + 80)), dmin = fp16_bits(ld_u16(b + 82));
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float dl = mul(d, static_cast<float>(sc[2 * r] & 0xF)),
                  ml = mul(dmin, static_cast<float>(sc[2 * r] >> 4));
#pragma unroll
      for (int k = 0; k < 4; ++k)
        v[4 * r + k] = sub(mul(dl, static_cast<float>((q >> (8 * k + 2 * r)) & 3)), ml);
    }
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const float* x) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), n = t >> 3, l0 = 4 * (t & 7);
    const uint32_t q = ld_u32<4>(b + 16 + 32 * n + l0);
    const uint8_t* sc = b + 8 * n + l0 / 16;
    float acc = 0.f, acc_min = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float4 xv = *reinterpret_cast<const float4*>(x + run_start(u, r));
      acc += static_cast<float>(sc[2 * r] & 0xF) * dot4((q >> (2 * r)) & 0x03030303u, xv, kMagic);
      acc_min += static_cast<float>(sc[2 * r] >> 4) * sum4(xv);
    }
    return fp16_bits(ld_u16(b + 80)) * acc - fp16_bits(ld_u16(b + 82)) * acc_min;
  }
};

// block_q3_K: hmask[32], qs[64], scales[12], fp16 d (110 bytes, 2-byte aligned): d·(sc − 32)·q with
// q = 2 bits of qs − (hmask bit 4n + r of byte l clear ? 4 : 0), so q + 4 = the 2 bits | hbit << 2.
template <>
struct Unit<GgmlType::Q3_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 110;
  static constexpr int kValues = 16, kRuns = 4, kRunLen = 4;
  __device__ static int run_start(int64_t u, int r) {
    return Unit<GgmlType::Q6_K>::run_start(u, r);
  }
  // q + 4 of run r: 4 bytes in 0..7.
  __device__ static uint32_t levels(uint32_t q, uint32_t hm, int n, int r) {
    return ((q >> (2 * r)) & 0x03030303u) | (((hm >> (4 * n + r)) & 0x01010101u) << 2);
  }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), n = t >> 3, l0 = 4 * (t & 7);
    const uint32_t q = ld_u32_a2(b + 32 + 32 * n + l0), hm = ld_u32_a2(b + l0);
    const float d = fp16_bits(ld_u16(b + 108));
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float dl = mul(d, static_cast<float>(q3k_scale(b + 96, 8 * n + 2 * r + l0 / 16)));
      const uint32_t w = levels(q, hm, n, r);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        v[4 * r + k] = mul(dl, static_cast<float>(static_cast<int>((w >> (8 * k)) & 0xFF) - 4));
    }
  }
  __device__ static float dot(const uint8_t* row, int64_t u, const float* x) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), n = t >> 3, l0 = 4 * (t & 7);
    const uint32_t q = ld_u32_a2(b + 32 + 32 * n + l0), hm = ld_u32_a2(b + l0);
    float acc = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float4 xv = *reinterpret_cast<const float4*>(x + run_start(u, r));
      acc += static_cast<float>(q3k_scale(b + 96, 8 * n + 2 * r + l0 / 16)) *
             dot4(levels(q, hm, n, r), xv, kMagic + 4.f);
    }
    return fp16_bits(ld_u16(b + 108)) * acc;
  }
};

// Whether Unit<T> has its own fast dot (unit_dot calls it instead of decode-then-dot).
template <class U, class = void>
struct HasUnitDot : std::false_type {};
template <class U>
struct HasUnitDot<U, std::void_t<decltype(U::dot(static_cast<const uint8_t*>(nullptr), int64_t{},
                                                 static_cast<const float*>(nullptr)))>>
    : std::true_type {};

}  // namespace ferry::cuda::detail
