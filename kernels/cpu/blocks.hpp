#pragma once
// Byte layouts of the quantized blocks Ferry computes with, identical to ggml's block_* structs
// (ggml-common.h). Only kernels/cpu includes this; everything outside asks runtime/core/types.hpp
// for sizes. fp16 fields are stored as raw IEEE-half bits (uint16_t).
#include <cstdint>
#include <cstring>

namespace ferry::cpu {

inline constexpr int kQK8_0 = 32;  // values per Q8_0 block (and Q4_0, Q4_1, Q5_0, Q5_1, Q8_1,
                                   // IQ4_NL, MXFP4: every 32-value format)
inline constexpr int kQK_K = 256;  // values per K-quant super-block (and IQ4_XS)

// ---- 32-value blocks. In all of them byte j of qs holds value j in its low nibble and value
// j + 16 in its high nibble.

// d·(q − 8), q in [0, 15].
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// d·q + m, q in [0, 15].
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// d·(q − 16), q in [0, 31]: bit j of the little-endian 32-bit qh is the fifth bit of value j.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// d·q + m, q in [0, 31], fifth bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// kIq4nlValues[q]·d: a non-uniform 4-bit grid.
struct BlockIQ4NL {
  uint16_t d;
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockIQ4NL) == 18);

// OCP microscaling FP4: e2m1 codes with a shared power-of-two scale e (E8M0, 2^(e − 127)).
// ggml stores the e2m1 values doubled (kMxfp4Values) and halves the scale (e8m0_to_fp32_half),
// which keeps the levels integers.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

// Activation side of Q4_1/Q5_1: Q8_0 plus s = d·Σ qs (as fp16), which applies the weight's m.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_1) == 36);

inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml's best_index_int8(16, kvalues_iq4nl, x): the index of the grid level nearest x (bisection;
// a tie between two levels goes to the upper one), what every IQ4 quantizer picks levels with.
inline int iq4nl_nearest_level(float x) {
  if (x <= kIq4nlValues[0]) return 0;
  if (x >= kIq4nlValues[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < kIq4nlValues[mav]) mu = mav;
    else ml = mav;
  }
  return x - kIq4nlValues[mu - 1] < kIq4nlValues[mu] - x ? mu - 1 : mu;
}

// d·q[i]
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// 8 sub-blocks of 32 values; sub-block j has a 6-bit scale sc_j and 6-bit min m_j packed in
// scales[12] (see scale_min_k4). value = d·sc_j·q − dmin·m_j, q in [0, 15].
// qs: 4 chunks of 32 bytes; chunk c holds sub-block 2c in the low nibbles, 2c+1 in the high ones.
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4K) == 144);

// Q4_K plus a fifth bit: bit 2c of qh[l] extends the low nibble of qs chunk c at byte l, bit 2c+1
// the high nibble. q in [0, 31].
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5K) == 176);

// 16 sub-blocks of 16 values, int8 scale each. Per 128-value half h (ql += 64h, qh += 32h), byte
// l < 32 gives four values: l, l+32, l+64, l+96 from the low nibble of ql[l], low of ql[l+32],
// high of ql[l], high of ql[l+32], with 2-bit fields 0,2,4,6 of qh[l] on top; value = d·sc·(q − 32).
struct BlockQ6K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6K) == 210);

// 16 sub-blocks of 16 values; scales[j] holds sub-block j's 4-bit scale (low) and 4-bit min
// (high). Per 128-value half h (qs += 32h), bits 2k..2k+1 of qs[l] are value 32k + l.
// value = d·sc·q − dmin·m, q in [0, 3].
struct BlockQ2K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2K) == 84);

// Q2_K's 2-bit layout plus a third bit: bit 4h + k of hmask[l] belongs to value 128h + 32k + l, and
// a clear bit subtracts 4. 16 six-bit scales packed in scales[12] (see q3k_scales).
// value = d·(sc − 32)·(q − (hbit ? 0 : 4)), q in [0, 3].
struct BlockQ3K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3K) == 110);

// 8 sub-blocks of 32 values, each laid out as an IQ4_NL block (qs += 16 per sub-block), with a
// 6-bit scale: low 4 bits in scales_l (sub-block j: byte j/2, nibble j%2), high 2 bits at bits
// 2j..2j+1 of scales_h. value = d·(ls − 32)·kIq4nlValues[q].
struct BlockIQ4XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4XS) == 136);

// Activation side of the K-quant dot products: f32 scale, int8 values, and the sum of each group
// of 16 values (lets the dot product apply mins and offsets once per group).
struct BlockQ8K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// ---- Helpers. In an anonymous namespace on purpose (as simd_common.hpp's): the ISA-specific
// files include this header too, and a shared inline copy compiled with AVX-512 flags could be the
// one the linker keeps for the baseline callers.
namespace {

// 2^(e − 128): half the E8M0 scale (ggml's e8m0_to_fp32_half). e = 0 and 1 are the subnormals
// 2^-128 and 2^-127; e = 255 (NaN in the OCP format) is not special-cased, as in ggml.
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t{e - 1u} << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 16 scales of a Q3_K block minus 32 (so in [−32, 31]), unpacked from 12 bytes: scale j has its
// low 4 bits in byte j (j < 8, low nibble) or byte j − 8 (high nibble), and its high 2 bits at bits
// 2(j / 4)..+1 of byte 8 + j % 4.
inline void q3k_scales(const uint8_t* s12, int8_t* out16) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? s12[j] & 0xF : s12[j - 8] >> 4;
    const int hi = (s12[8 + j % 4] >> (2 * (j / 4))) & 3;
    out16[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// The 6-bit scale of IQ4_XS sub-block j (0..7) minus 32.
inline int iq4xs_scale(const BlockIQ4XS& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}

}  // namespace

}  // namespace ferry::cpu
