// AVX2 dequantization, bit-exact with dequantize_row_ref: integer→float conversions are exact and
// every float operation of the reference appears here once, in the same order. This file is built
// with -mfma, so a·b − c would be contracted into an FMA (one rounding instead of two); an empty
// asm barrier on the product keeps the two roundings of the reference.
#include "kernels/cpu/simd_common.hpp"

namespace ferry::cpu {
namespace {

inline __m256 keep(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// 8 int8 → 8 float
inline __m256 i8x8_to_f32(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// 8 bytes of 0..255 levels → 8 float
inline __m256 u8x8_to_f32(__m128i v8) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v8)); }

void f16(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = h2f(x[i]);
}

void q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const __m256 d = _mm256_set1_ps(h2f(x[i].d));
    for (int j = 0; j < kQK8_0; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(i8x8_to_f32(x[i].qs + j), d));
  }
}

// The 32-value blocks (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): value j from the low nibble of qs[j] (j <
// 16) or the high nibble of qs[j - 16], the fifth bit (Q5_*) bit j of qh; 8 values at a time as
// int32 lanes, converted exactly, then the reference's d·q (IQ4_NL: d·grid[q]) or (q·d) + m.
enum class Legacy { q4_0, q4_1, q5_0, q5_1, iq4_nl };

template <Legacy kL, typename Block>
void legacy32(const Block* x, float* y, int64_t nb) {
  constexpr bool kQ5 = kL == Legacy::q5_0 || kL == Legacy::q5_1;
  constexpr bool kMin = kL == Legacy::q4_1 || kL == Legacy::q5_1;
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i one = _mm256_set1_epi32(1);
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const Block& b = x[i];
    const __m256 d = _mm256_set1_ps(h2f(b.d));
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    __m128i nib[2] = {_mm_and_si128(bits, m4), _mm_and_si128(_mm_srli_epi16(bits, 4), m4)};
    if constexpr (kL == Legacy::iq4_nl) {
      nib[0] = _mm_shuffle_epi8(grid, nib[0]);
      nib[1] = _mm_shuffle_epi8(grid, nib[1]);
    }
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kQ5) {
      uint32_t h;
      std::memcpy(&h, b.qh, 4);
      qh = _mm256_set1_epi32(static_cast<int>(h));
    }
    for (int g = 0; g < 4; ++g) {  // values 8g .. 8g + 7
      const __m128i src = (g & 1) ? _mm_srli_si128(nib[g >> 1], 8) : nib[g >> 1];
      __m256i q = kL == Legacy::iq4_nl ? _mm256_cvtepi8_epi32(src) : _mm256_cvtepu8_epi32(src);
      if constexpr (kQ5) {
        const __m256i h5 = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(lane, _mm256_set1_epi32(8 * g))), one);
        q = _mm256_or_si256(q, _mm256_slli_epi32(h5, 4));
      }
      if constexpr (kL == Legacy::q4_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
      if constexpr (kL == Legacy::q5_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(16));
      const __m256 f = _mm256_cvtepi32_ps(q);
      if constexpr (kMin)
        _mm256_storeu_ps(y + 8 * g, _mm256_add_ps(keep(_mm256_mul_ps(f, d)), _mm256_set1_ps(h2f(b.m))));
      else
        _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(d, f));
    }
  }
}

template <bool kQ5, typename Block>
void q45_k(const Block* x, float* y, int64_t nb) {
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i m1 = _mm_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    alignas(16) uint8_t sm[16];
    unpack_q4k_scales(x[i].scales, sm);
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    for (int c = 0; c < 4; ++c) {
      for (int half = 0; half < 2; ++half) {  // low nibbles: sub-block 2c; high: 2c+1
        const int s = 2 * c + half;
        const __m256 dv = _mm256_set1_ps(d * sm[s]);
        const __m256 mv = _mm256_set1_ps(min * sm[8 + s]);
        for (int l = 0; l < 32; l += 16) {
          const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + 32 * c + l));
          __m128i q = _mm_and_si128(half ? _mm_srli_epi16(bits, 4) : bits, m4);
          if constexpr (kQ5) {
            const __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qh + l));
            q = _mm_or_si128(q, _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hb, s), m1), 4));
          }
          float* out = y + 64 * c + 32 * half + l;
          _mm256_storeu_ps(out, _mm256_sub_ps(keep(_mm256_mul_ps(dv, u8x8_to_f32(q))), mv));
          _mm256_storeu_ps(out + 8, _mm256_sub_ps(keep(_mm256_mul_ps(dv, u8x8_to_f32(_mm_srli_si128(q, 8)))), mv));
        }
      }
    }
    y += kQK_K;
  }
}

void q6_k(const BlockQ6K* x, float* y, int64_t nb) {
  alignas(32) int8_t q[kQK_K];
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = h2f(x[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      int8_t* a = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        a[l + 0] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        a[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        a[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        a[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    for (int g = 0; g < kQK_K / 16; ++g) {  // reference: (d·sc)·q
      const __m256 ds = _mm256_set1_ps(d * x[i].scales[g]);
      _mm256_storeu_ps(y + 16 * g, _mm256_mul_ps(ds, i8x8_to_f32(q + 16 * g)));
      _mm256_storeu_ps(y + 16 * g + 8, _mm256_mul_ps(ds, i8x8_to_f32(q + 16 * g + 8)));
    }
  }
}

}  // namespace

bool detail::dequantize_row_avx2(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F16: f16(static_cast<const uint16_t*>(src), dst, n); return true;
    case GgmlType::Q8_0: q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK8_0); return true;
    case GgmlType::Q4_K: q45_k<false>(static_cast<const BlockQ4K*>(src), dst, n / kQK_K); return true;
    case GgmlType::Q5_K: q45_k<true>(static_cast<const BlockQ5K*>(src), dst, n / kQK_K); return true;
    case GgmlType::Q6_K: q6_k(static_cast<const BlockQ6K*>(src), dst, n / kQK_K); return true;
    case GgmlType::Q4_0: legacy32<Legacy::q4_0>(static_cast<const BlockQ4_0*>(src), dst, n / kQK8_0); return true;
    case GgmlType::Q4_1: legacy32<Legacy::q4_1>(static_cast<const BlockQ4_1*>(src), dst, n / kQK8_0); return true;
    case GgmlType::Q5_0: legacy32<Legacy::q5_0>(static_cast<const BlockQ5_0*>(src), dst, n / kQK8_0); return true;
    case GgmlType::Q5_1: legacy32<Legacy::q5_1>(static_cast<const BlockQ5_1*>(src), dst, n / kQK8_0); return true;
    case GgmlType::IQ4_NL: legacy32<Legacy::iq4_nl>(static_cast<const BlockIQ4NL*>(src), dst, n / kQK8_0); return true;
    default: return false;
  }
}

}  // namespace ferry::cpu
