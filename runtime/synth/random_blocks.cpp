#include "runtime/synth/random_blocks.hpp"

#include <cmath>
#include <cstring>

#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/synth/init.hpp"

namespace ferry::synth {
namespace {

constexpr int kQK = 256;

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Uniform integer in [0, n) from 16 random bits (bias below n / 65536).
uint32_t below(uint64_t bits16, uint32_t n) { return static_cast<uint32_t>(((bits16 & 0xFFFF) * n) >> 16); }

// Q2_K: sub-block scale s and min m in 8..15 with m = s, dmin = 1.5·d, so x = d·s·(q − 1.5):
// E[(q − 1.5)²] = 1.25, E[s²] = 137.5.
void q2_k_block(RowRng& rng, float rms, uint8_t* y) {
  uint64_t sc = rng.bits();
  for (int j = 0; j < 16; ++j, sc >>= 3) {
    const auto s = static_cast<uint8_t>(8 + (sc & 7));
    y[j] = static_cast<uint8_t>(s | (s << 4));
  }
  for (int i = 0; i < 64; i += 8) {
    const uint64_t q = rng.bits();
    std::memcpy(y + 16 + i, &q, 8);
  }
  const uint16_t d = fp32_to_fp16(rms / std::sqrt(137.5f * 1.25f));
  put_u16(y + 80, d);
  put_u16(y + 82, fp32_to_fp16(1.5f * fp16_to_fp32(d)));
}

// Q3_K: q ∈ −3..3 (E[q²] = 4), s − 32 ∈ 8..31 (E[(s − 32)²] = 428.17). Value 128·h + 32·j + l
// (h < 2, j < 4, l < 32) has its low two bits at bit 2j of qs[32·h + l], its high bit (set for
// q ≥ 0; q = low − 4 when clear) at bit 4h + j of hmask[l], and scale 8h + 2j + l / 16.
void q3_k_block(RowRng& rng, float rms, uint8_t* y) {
  uint8_t* hmask = y;
  uint8_t* qs = y + 32;
  uint8_t* scales = y + 96;
  std::memset(y, 0, 108);
  for (int v = 0; v < kQK; v += 4) {
    uint64_t r = rng.bits();
    for (int k = 0; k < 4; ++k, r >>= 16) {
      const int i = v + k, h = i / 128, j = (i % 128) / 32, l = i % 32;
      const int q = static_cast<int>(below(r, 7)) - 3;
      qs[32 * h + l] |= static_cast<uint8_t>(((q + 4) & 3) << (2 * j));
      if (q >= 0) hmask[l] |= static_cast<uint8_t>(1 << (4 * h + j));
    }
  }
  uint64_t r = 0;
  for (int j = 0; j < 16; ++j) {
    if (j % 4 == 0) r = rng.bits();
    int l = 32 + 8 + static_cast<int>(below(r >> (16 * (j % 4)), 24));  // 6 bits, offset 32
    if (j < 8) scales[j] = static_cast<uint8_t>(l & 0xF);
    else scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    l >>= 4;
    scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
  }
  put_u16(y + 108, fp32_to_fp16(rms / std::sqrt(4.0f * 428.1667f)));
}

}  // namespace

bool is_random_block_type(GgmlType t) { return t == GgmlType::Q2_K || t == GgmlType::Q3_K; }

void random_block_rows(GgmlType t, uint64_t stream_seed, uint64_t row_begin, uint64_t n_rows,
                       uint64_t row_len, float rms, uint8_t* dst) {
  if (!is_random_block_type(t) || row_len % kQK != 0)
    fail(ErrorKind::internal, "random_block_rows: {} rows of {}", row_len, type_name(t));
  const uint32_t block_bytes = type_info(t).block_bytes;
  void (*block)(RowRng&, float, uint8_t*) = t == GgmlType::Q2_K ? q2_k_block : q3_k_block;
  for (uint64_t r = 0; r < n_rows; ++r) {
    RowRng rng(stream_seed, row_begin + r);
    uint8_t* y = dst + r * (row_len / kQK) * block_bytes;
    for (uint64_t b = 0; b < row_len / kQK; ++b) block(rng, rms, y + b * block_bytes);
  }
}

}  // namespace ferry::synth
