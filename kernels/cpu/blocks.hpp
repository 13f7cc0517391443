#pragma once
// Byte layouts of the quantized blocks Ferry computes with, identical to ggml's block_* structs
// (ggml-common.h). Only kernels/cpu includes this; everything outside asks runtime/core/types.hpp
// for sizes. fp16 fields are stored as raw IEEE-half bits (uint16_t).
#include <cstdint>

namespace ferry::cpu {

inline constexpr int kQK8_0 = 32;  // values per Q8_0 block
inline constexpr int kQK_K = 256;  // values per K-quant super-block

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

// Activation side of the K-quant dot products: f32 scale, int8 values, and the sum of each group
// of 16 values (lets the dot product apply mins and offsets once per group).
struct BlockQ8K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

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

}  // namespace ferry::cpu
