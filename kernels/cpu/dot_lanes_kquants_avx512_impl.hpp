#pragma once
// AVX-512 kernels of Q2_K, Q3_K, Q5_K, Q6_K and IQ4_XS in ggml's tiled order (dot_ref_kquants.cpp's
// dot_tiled, dot_ref.cpp's dot_k_tiled: per block the exact integer sum s = Σ_j sc_j·Σ w·x over its
// sub-blocks, r = d_w·s (Q2_K, Q5_K: minus dmin_w·m, fused), acc = fma(r, d_x, acc)), which
// llama.cpp takes for products of 8 or more activation rows, dense and expert alike. As
// dot_lanes_q4k_avx512_impl.hpp: the activations come packed lane-wise (one activation row per
// 32-bit lane), each weight row's four levels are broadcast against sixteen rows' four bytes, and
// nothing is reduced across lanes.
//
// vpdpbusd multiplies unsigned by signed bytes, so the levels are stored with an offset that
// makes them unsigned (Q3_K +4, IQ4_XS +128, Q6_K +32: its stored 6 bits; Q2_K's and Q5_K's are)
// and the offset's share, off·Σ_j sc_j·bsum_j, is taken back out of each block's sum; integers
// throughout, so s is the reference's exactly. Without VNNI (maddubs: saturating 16-bit pair sums)
// only the small levels of Q2_K and Q3_K are safe; avx512_table() gives IQ4_XS this kernel with
// VNNI only. Included by dot_avx512_impl.hpp after dot_lanes_q4k_avx512_impl.hpp.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace ferry::cpu {
namespace {

// One weight row's block for the lanes kernels: levels + offset (one byte per value, value order),
// the 16 sub-block scales as int32, the scales and (Q2_K) mins of sub-blocks 2p, 2p+1 as int16
// pairs, d and dmin.
struct KLanesBlock {
  int32_t sc[16];
  int32_t sc_pairs[8];
  int32_t min_pairs[8];
  float d, dmin;
};

inline int32_t pair16(int lo, int hi) {
  return static_cast<int32_t>((static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16) |
                              static_cast<uint16_t>(lo));
}

// Values 128h + 32k + l (l < 32) of a Q2_K/Q3_K block: bits 2k..2k+1 of qs[32h + l]; Q3_K adds
// 4 where bit 4h + k of hmask[l] is set (its level is those two bits − 4 where the bit is clear).
template <bool kHigh>
inline void unpack_two_bits(const uint8_t* qs, const uint8_t* hmask, uint8_t* levels) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m1 = _mm256_set1_epi8(1);
  const __m256i h =
      kHigh ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask)) : _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * half));
    for (int k = 0; k < 4; ++k) {
      __m256i v = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
      if constexpr (kHigh)
        v = _mm256_or_si256(
            v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4 * half + k), m1), 2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(levels + 128 * half + 32 * k), v);
    }
  }
}

inline void unpack_lanes(const BlockQ2K& b, uint8_t* levels, KLanesBlock& u) {
  unpack_two_bits<false>(b.qs, nullptr, levels);
  for (int j = 0; j < 16; ++j) u.sc[j] = b.scales[j] & 0xF;
  for (int p = 0; p < 8; ++p) {
    u.sc_pairs[p] = pair16(u.sc[2 * p], u.sc[2 * p + 1]);
    u.min_pairs[p] = pair16(b.scales[2 * p] >> 4, b.scales[2 * p + 1] >> 4);
  }
  u.d = h2f(b.d);
  u.dmin = h2f(b.dmin);
}

inline void unpack_lanes(const BlockQ3K& b, uint8_t* levels, KLanesBlock& u) {
  unpack_two_bits<true>(b.qs, b.hmask, levels);
  int8_t sc[16];
  q3k_scales(b.scales, sc);
  for (int j = 0; j < 16; ++j) u.sc[j] = sc[j];
  for (int p = 0; p < 8; ++p) u.sc_pairs[p] = pair16(sc[2 * p], sc[2 * p + 1]);
  u.d = h2f(b.d);
}

inline void unpack_lanes(const BlockIQ4XS& b, uint8_t* levels, KLanesBlock& u) {
  alignas(16) uint8_t table[16];
  for (int q = 0; q < 16; ++q) table[q] = static_cast<uint8_t>(kIq4nlValues[q] + 128);
  const __m128i t = _mm_load_si128(reinterpret_cast<const __m128i*>(table));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  for (int s = 0; s < 8; ++s) {  // 32-value sub-block s: values j < 16 low nibbles, j ≥ 16 high
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(levels + 32 * s),
                     _mm_shuffle_epi8(t, _mm_and_si128(q, m4)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(levels + 32 * s + 16),
                     _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(q, 4), m4)));
  }
  for (int j = 0; j < 16; ++j) u.sc[j] = iq4xs_scale(b, j / 2);
  for (int p = 0; p < 8; ++p) u.sc_pairs[p] = pair16(u.sc[2 * p], u.sc[2 * p + 1]);
  u.d = h2f(b.d);
}

// Q5_K: chunk c holds values 64c .. 64c + 63, low nibbles then high nibbles, the fifth bits in
// bits 2c, 2c + 1 of qh; scales and mins per 32-value sub-block (Q4_K's 12-byte packing).
inline void unpack_lanes(const BlockQ5K& b, uint8_t* levels, KLanesBlock& u) {
  const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
  for (int c = 0; c < 4; ++c)
    _mm512_storeu_si512(levels + 64 * c, q45k_chunk_levels<true>(b, c, hbits));
  alignas(16) uint8_t sm[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(sm), q4k_scales_mins(b.scales));
  for (int j = 0; j < 16; ++j) u.sc[j] = sm[j / 2];
  for (int p = 0; p < 8; ++p) {
    u.sc_pairs[p] = pair16(sm[p], sm[p]);
    u.min_pairs[p] = pair16(sm[8 + p], sm[8 + p]);
  }
  u.d = h2f(b.d);
  u.dmin = h2f(b.dmin);
}

// Q6_K: half h holds values 128h .. 128h + 127: low four bits from ql (low nibbles of bytes
// 64h .. 64h + 63, then their high nibbles), the top two from qh[32h + l] (bits 0-1, 2-3, 4-5, 6-7
// for the four 32-value quarters); scales int8 per 16-value sub-block.
inline void unpack_lanes(const BlockQ6K& b, uint8_t* levels, KLanesBlock& u) {
  for (int h = 0; h < 2; ++h) {
    __m512i qa, qb;
    q6k_half_levels(b, h, qa, qb);
    _mm512_storeu_si512(levels + 128 * h, qa);
    _mm512_storeu_si512(levels + 128 * h + 64, qb);
  }
  for (int j = 0; j < 16; ++j) u.sc[j] = b.scales[j];
  for (int p = 0; p < 8; ++p) u.sc_pairs[p] = pair16(b.scales[2 * p], b.scales[2 * p + 1]);
  u.d = h2f(b.d);
}

template <bool kVnni, typename Block>
struct KQuantLanes512 {
  static constexpr bool kMins = std::is_same_v<Block, BlockQ2K> || std::is_same_v<Block, BlockQ5K>;
  static constexpr int kOffset = std::is_same_v<Block, BlockQ3K>     ? 4
                                 : std::is_same_v<Block, BlockIQ4XS> ? 128
                                 : std::is_same_v<Block, BlockQ6K>   ? 32
                                                                     : 0;
  static constexpr int kRows = detail::kLanesWeightRows;
  static constexpr int kLanes = detail::kLanes;

  // The LanesFn of dot_kernels.hpp.
  static void run(int64_t n, const void* wv, size_t w_stride, int nw, const uint8_t* packs,
                  size_t pack_stride, int64_t nx, float* out, size_t out_stride) {
    const auto rows = LaneRows<KLanesBlock>::make<Block>(
        n / kQK_K, wv, w_stride, nw,
        [](const Block& b, uint8_t* levels, KLanesBlock& u) { unpack_lanes(b, levels, u); });
    for (int64_t p0 = 0; p0 < nx; p0 += kLanes) {
      const uint8_t* xp = packs + static_cast<size_t>(p0 / kLanes) * pack_stride;
      __m512 acc[kRows];
      for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t i = 0; i < rows.nb; ++i) {
        const uint8_t* xb = xp + i * detail::kLanesBlockBytes;
        const uint8_t* lv[kRows];
        const KLanesBlock* u[kRows];
        rows.block(i, lv, u);
        __m512i s[kRows];
        for (int j = 0; j < 16; ++j) {  // 16-value sub-block j: groups of four 4j .. 4j + 3
          __m512i t[kRows];
          dot_groups<kVnni, 4>(xb, lv, 4 * j, t);
          for (int r = 0; r < kRows; ++r) {
            const __m512i scaled = _mm512_mullo_epi32(t[r], _mm512_set1_epi32(u[r]->sc[j]));
            s[r] = j == 0 ? scaled : _mm512_add_epi32(s[r], scaled);
          }
        }
        const __m512 dy = _mm512_loadu_ps(xb + detail::kLanesDOffset);
        for (int r = 0; r < kRows; ++r) {
          __m512i corr = _mm512_setzero_si512(), m = _mm512_setzero_si512();
          for (int p = 0; p < 8; ++p) {
            const __m512i bs = _mm512_loadu_si512(xb + detail::kLanesBsum16Offset + 64 * p);
            if constexpr (kOffset != 0)
              corr = _mm512_add_epi32(corr,
                                      _mm512_madd_epi16(bs, _mm512_set1_epi32(u[r]->sc_pairs[p])));
            if constexpr (kMins)
              m = _mm512_add_epi32(m, _mm512_madd_epi16(bs, _mm512_set1_epi32(u[r]->min_pairs[p])));
          }
          if constexpr (kOffset != 0)
            s[r] = _mm512_sub_epi32(s[r], _mm512_mullo_epi32(corr, _mm512_set1_epi32(kOffset)));
          __m512 rr = _mm512_mul_ps(_mm512_set1_ps(u[r]->d), _mm512_cvtepi32_ps(s[r]));
          if constexpr (kMins)
            rr = _mm512_fnmadd_ps(_mm512_set1_ps(u[r]->dmin), _mm512_cvtepi32_ps(m), rr);
          acc[r] = _mm512_fmadd_ps(rr, dy, acc[r]);
        }
      }
      const int64_t np = std::min<int64_t>(kLanes, nx - p0);
      for (int r = 0; r < nw; ++r) store_lanes(acc[r], r, p0, np, out, out_stride);
    }
  }
};

}  // namespace
}  // namespace ferry::cpu
