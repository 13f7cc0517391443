#pragma once
// AVX-512 (F, BW, VL, DQ) dot-product kernels, included by dot_avx512.cpp (kVnni = false) and
// dot_avx512vnni.cpp (kVnni = true); the two differ only in dot_u8s8 / dot_s16 below, where VNNI
// fuses the multiply-add chain into one instruction. Each register covers 64 weight values:
// one Q4_K/Q5_K chunk (low nibbles in the lower half, high nibbles in the upper half) or half of
// a Q6_K 128-value half-block.
#include "kernels/cpu/simd_common.hpp"

namespace ferry::cpu {
namespace {

// acc + pairwise products of signed 16-bit lanes, per 32-bit lane.
template <bool kVnni>
inline __m512i dot_s16(__m512i acc, __m512i a, __m512i b) {
  if constexpr (kVnni) return _mm512_dpwssd_epi32(acc, a, b);
  else return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
}

// Horizontal sum (not _mm512_reduce_add_ps, which trips GCC 12's -Wmaybe-uninitialized).
inline float hsum16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

inline __m512i join_256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Lower half + upper half of 16 int32 lanes: each 256-bit half covers 32 consecutive values of
// the block, so this gives the lanes of the 256-bit kernels (exact: integers).
inline __m256i fold_512(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// Chunk c of a Q4_K/Q5_K block as 64 levels in value order (values 64c .. 64c + 63: the low nibbles
// of qs[32c ..] in the lower half, their high nibbles in the upper half); Q5_K adds its fifth bits,
// bits 2c and 2c + 1 of hbits (the block's qh).
template <bool kQ5, typename Block>
inline __m512i q45k_chunk_levels(const Block& b, int c, __m256i hbits) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
  __m512i q = _mm512_and_si512(join_256(bits, _mm256_srli_epi16(bits, 4)), _mm512_set1_epi8(0x0F));
  if constexpr (kQ5) {
    const __m512i hb = join_256(_mm256_srli_epi16(hbits, 2 * c), _mm256_srli_epi16(hbits, 2 * c + 1));
    q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(hb, _mm512_set1_epi8(1)), 4));
  }
  return q;
}

// Half h of a Q6_K block as levels 0..63 in value order: qa = values 128h .. 128h + 63 (low nibbles
// of ql[64h ..], 2-bit fields 0 and 1 of qh[32h ..]), qb = values 128h + 64 .. 128h + 127 (high
// nibbles, fields 2 and 3).
inline void q6k_half_levels(const BlockQ6K& b, int h, __m512i& qa, __m512i& qb) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i l = _mm512_loadu_si512(b.ql + 64 * h);
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
  const __m512i ha = join_256(hb, _mm256_srli_epi16(hb, 2));
  const __m512i hbb = join_256(_mm256_srli_epi16(hb, 4), _mm256_srli_epi16(hb, 6));
  qa = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(ha, m3), 4));
  qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                       _mm512_slli_epi16(_mm512_and_si512(hbb, m3), 4));
}

// ---- float-like weights: 16 values per step, masked loads for the tail.

struct Load512F32 {
  using T = float;
  static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 load_n(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct Load512F16 {
  using T = uint16_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load_n(const T* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct Load512BF16 {
  using T = uint16_t;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load_n(const T* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

template <typename L>
struct Float512Kernel {
  using T = typename L::T;
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const T* w = static_cast<const T*>(wv);
    const T* x[NX];
    rows_of(xv, stride, x);
    __m512 acc0[NX], acc1[NX];
    for (int k = 0; k < NX; ++k) acc0[k] = acc1[k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      prefetch_ahead<sizeof(T) / 2>(w + i);  // 64 or 128 bytes per step
      const __m512 w0 = L::load(w + i), w1 = L::load(w + i + 16);
      for (int k = 0; k < NX; ++k) {
        acc0[k] = _mm512_fmadd_ps(w0, L::load(x[k] + i), acc0[k]);
        acc1[k] = _mm512_fmadd_ps(w1, L::load(x[k] + i + 16), acc1[k]);
      }
    }
    for (; i < n; i += 16) {
      const int64_t left = n - i;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      const __m512 w0 = L::load_n(w + i, m);
      for (int k = 0; k < NX; ++k) acc0[k] = _mm512_fmadd_ps(w0, L::load_n(x[k] + i, m), acc0[k]);
    }
    for (int k = 0; k < NX; ++k) out[k] = hsum16(_mm512_add_ps(acc0[k], acc1[k]));
  }
};

// ---- Q8_0 × Q8_0, one 32-value block per 256-bit step: a 512-bit register would hold two blocks
// with two different scales, and the per-block scale handling then costs more than it saves
// (measured). |w| · sign(x, w) turns s8×s8 into the u8×s8 form of maddubs / vpdpbusd; one FMA
// chain of 8 lanes per row, the order dot_ref.cpp documents.

template <bool kVnni>
inline __m256i dot_u8s8_256(__m256i u, __m256i s) {
  if constexpr (kVnni) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  else return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

template <bool kVnni>
struct Q8_0Kernel512 {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ8_0*>(wv);
    const BlockQ8_0* x[NX];
    rows_of(xv, stride, x);
    __m256 acc[NX];
    for (int k = 0; k < NX; ++k) acc[k] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
      prefetch_ahead<1>(w + ib);
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[ib].qs));
      const __m256i aw = _mm256_sign_epi8(qw, qw);
      const float dw = h2f(w[ib].d);
      for (int k = 0; k < NX; ++k) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][ib].qs));
        const __m256 p = _mm256_cvtepi32_ps(dot_u8s8_256<kVnni>(aw, _mm256_sign_epi8(qx, qw)));
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(x[k][ib].d)), p, acc[k]);
      }
    }
    for (int k = 0; k < NX; ++k) out[k] = hsum8(acc[k]);
  }
};

// Lane indices that spread 16-bit scales over 32 lanes, for _mm512_permutexvar_epi16.
struct ScaleIndex {
  alignas(64) uint16_t q4k[4][32];  // chunk c: 16 × scale 2c, 16 × scale 2c+1
  alignas(64) uint16_t q6k[4][32];  // quarter u: 8 × scale 4u, 4u+1, 4u+2, 4u+3
  constexpr ScaleIndex() : q4k(), q6k() {
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        q4k[c][l] = static_cast<uint16_t>(2 * c + l / 16);
        q6k[c][l] = static_cast<uint16_t>(4 * c + l / 8);
      }
  }
};
constexpr ScaleIndex kScaleIndex{};

inline __m512i load_index(const uint16_t* p) { return _mm512_load_si512(p); }

// kOrder as dot_avx2.cpp's Q45KKernel, except group4: Q4_K's 4-row order runs faster in the
// 256-bit kernel (its per-chunk sums need no folding), which avx512_table() takes instead.
template <bool kVnni, bool kQ5, detail::DotOrder kOrder = detail::DotOrder::row>
struct Q45KKernel512 {
  static_assert(kOrder != detail::DotOrder::group4);
  using Block = std::conditional_t<kQ5, BlockQ5K, BlockQ4K>;
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const Block*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    Q45KFloat<kQ5, kOrder, NX> f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const Block& b = w[i];
      prefetch_ahead<3>(&b);  // 144 / 176 bytes
      const __m128i sm = q4k_scales_mins(b.scales);
      const __m512i sc8 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));  // 8 × s16 scales
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (kQ5) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
      __m512i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i sc = _mm512_permutexvar_epi16(load_index(kScaleIndex.q4k[c]), sc8);
        const __m512i q = q45k_chunk_levels<kQ5>(b, c, hbits);
        for (int k = 0; k < NX; ++k) {
          const __m512i y = _mm512_loadu_si512(x[k][i].qs + 64 * c);
          sumi[k] = dot_s16<kVnni>(sumi[k], _mm512_maddubs_epi16(q, y), sc);
        }
      }
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
      const float dw = h2f(b.d), dmw = h2f(b.dmin);
      // The upper half of each row's register holds the high-nibble sub-blocks: lane l of the two
      // halves together is the 8-lane kernels' lane l.
      __m256i s8[NX];
      for (int k = 0; k < NX; ++k) s8[k] = fold_512(sumi[k]);
      f.add(s8, m16, dw, dmw, x, i);
    }
    f.store(out);
  }
};

template <bool kVnni, bool kTiled = false>  // kTiled: per block as the tiled kernel
struct Q6KKernel512 {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ6K*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    Q6KFloat<kTiled, NX> f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockQ6K& b = w[i];
      prefetch_ahead<4>(&b);  // 210 bytes
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
      const __m512i sc_all = _mm512_castsi256_si512(sc16);
      __m512i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        __m512i qa, qb;
        q6k_half_levels(b, h, qa, qb);
        const __m512i sca = _mm512_permutexvar_epi16(load_index(kScaleIndex.q6k[2 * h]), sc_all);
        const __m512i scb = _mm512_permutexvar_epi16(load_index(kScaleIndex.q6k[2 * h + 1]), sc_all);
        for (int k = 0; k < NX; ++k) {
          const int8_t* y = x[k][i].qs + 128 * h;
          sumi[k] = dot_s16<kVnni>(sumi[k], _mm512_maddubs_epi16(qa, _mm512_loadu_si512(y)), sca);
          sumi[k] = dot_s16<kVnni>(sumi[k], _mm512_maddubs_epi16(qb, _mm512_loadu_si512(y + 64)), scb);
        }
      }
      __m256i s8[NX];  // the two 256-bit halves cover different 32-value groups: fold them
      for (int k = 0; k < NX; ++k) s8[k] = fold_512(sumi[k]);
      f.add(s8, sc16, h2f(b.d), x, i);
    }
    f.store(out);
  }
};

// ---- Q2_K, Q3_K, IQ4_XS: each register holds two 32-value groups (64 consecutive values); the
// two 256-bit halves fold into the 8 lanes of the AVX2 kernels (dot_kquants_avx2.cpp), whose float
// side (KFloat) they share. AVX-512 has no sign_epi8: signed levels use |w| and a masked negation
// of x, or (Q3_K) ggml's split into an unsigned part and a subtracted one.

template <bool kVnni, bool kTiled>
struct Q2KKernel512 {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ2K*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    KFloat<true, kTiled, NX> f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockQ2K& b = w[i];
      prefetch_ahead<2>(&b);  // 84 bytes
      const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
      const __m512i sc_all = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)));
      __m512i sumi[NX];
      __m256i mins[NX];
      for (int k = 0; k < NX; ++k) {
        sumi[k] = _mm512_setzero_si512();
        mins[k] = _mm256_madd_epi16(mins16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].bsums)));
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
        for (int p = 0; p < 2; ++p) {  // groups 2p, 2p+1 of the half: sub-blocks 8h + 4p .. + 3
          const __m512i q = _mm512_and_si512(join_256(_mm256_srli_epi16(bits, 4 * p), _mm256_srli_epi16(bits, 4 * p + 2)), m3);
          const __m512i sc = _mm512_permutexvar_epi16(load_index(kScaleIndex.q6k[2 * h + p]), sc_all);
          for (int k = 0; k < NX; ++k) {
            const __m512i y = _mm512_loadu_si512(x[k][i].qs + 128 * h + 64 * p);
            sumi[k] = dot_s16<kVnni>(sumi[k], _mm512_maddubs_epi16(q, y), sc);
          }
        }
      }
      __m256i s8[NX];
      for (int k = 0; k < NX; ++k) s8[k] = fold_512(sumi[k]);
      f.add(s8, mins, h2f(b.d), h2f(b.dmin), x, i);
    }
    f.store(out);
  }
};

template <bool kVnni, bool kTiled>
struct Q3KKernel512 {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ3K*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m256i m1 = _mm256_set1_epi8(1);
    KFloat<false, kTiled, NX> f;
    const __m256i none[NX] = {};
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockQ3K& b = w[i];
      prefetch_ahead<2>(&b);  // 110 bytes
      const __m512i sc_all = _mm512_castsi256_si512(q3k_scales16(b));
      const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
      __m512i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
        for (int p = 0; p < 2; ++p) {
          const int g0 = 2 * p, g1 = 2 * p + 1;
          const __m512i lo = _mm512_and_si512(join_256(_mm256_srli_epi16(bits, 2 * g0), _mm256_srli_epi16(bits, 2 * g1)), m3);
          // 4 where the high bit is clear: level = lo − that
          const __m256i c0 = _mm256_andnot_si256(_mm256_srli_epi16(hbits, 4 * h + g0), m1);
          const __m256i c1 = _mm256_andnot_si256(_mm256_srli_epi16(hbits, 4 * h + g1), m1);
          const __m512i hi = _mm512_slli_epi16(join_256(c0, c1), 2);
          const __m512i sc = _mm512_permutexvar_epi16(load_index(kScaleIndex.q6k[2 * h + p]), sc_all);
          for (int k = 0; k < NX; ++k) {
            const __m512i y = _mm512_loadu_si512(x[k][i].qs + 128 * h + 64 * p);
            const __m512i p16 = _mm512_sub_epi16(_mm512_maddubs_epi16(lo, y), _mm512_maddubs_epi16(hi, y));
            sumi[k] = dot_s16<kVnni>(sumi[k], p16, sc);
          }
        }
      }
      __m256i s8[NX];
      for (int k = 0; k < NX; ++k) s8[k] = fold_512(sumi[k]);
      f.add(s8, none, h2f(b.d), 0, x, i);
    }
    f.store(out);
  }
};

template <bool kVnni, bool kTiled>
struct IQ4XSKernel512 {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockIQ4XS*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m512i values = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    KFloat<false, kTiled, NX> f;
    const __m256i none[NX] = {};
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockIQ4XS& b = w[i];
      prefetch_ahead<3>(&b);  // 136 bytes
      __m512i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm512_setzero_si512();
      for (int s = 0; s < 8; s += 2) {  // sub-blocks s, s+1: 64 values
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 16 * s));
        // [lo(s), lo(s+1), hi(s), hi(s+1)] → [lo(s), hi(s), lo(s+1), hi(s+1)]: value order
        const __m512i idx = _mm512_shuffle_i64x2(
            join_256(_mm256_and_si256(bits, m4), _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4)),
            join_256(_mm256_and_si256(bits, m4), _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4)), _MM_SHUFFLE(3, 1, 2, 0));
        const __m512i q = _mm512_shuffle_epi8(values, idx);
        const __m512i aq = _mm512_abs_epi8(q);
        const __mmask64 neg = _mm512_movepi8_mask(q);
        const __m512i ls = join_256(_mm256_set1_epi16(static_cast<short>(iq4xs_scale(b, s))),
                                    _mm256_set1_epi16(static_cast<short>(iq4xs_scale(b, s + 1))));
        for (int k = 0; k < NX; ++k) {
          const __m512i y = _mm512_loadu_si512(x[k][i].qs + 32 * s);
          const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
          sumi[k] = dot_s16<kVnni>(sumi[k], _mm512_maddubs_epi16(aq, sy), ls);
        }
      }
      __m256i s8[NX];
      for (int k = 0; k < NX; ++k) s8[k] = fold_512(sumi[k]);
      f.add(s8, none, h2f(b.d), 0, x, i);
    }
    f.store(out);
  }
};

}  // namespace
}  // namespace ferry::cpu

#include "kernels/cpu/dot_rows_avx512_impl.hpp"
#include "kernels/cpu/dot_rows_q4k_avx512_impl.hpp"
#include "kernels/cpu/dot_lanes_q4k_avx512_impl.hpp"
#include "kernels/cpu/dot_lanes_kquants_avx512_impl.hpp"

namespace ferry::cpu {
namespace {

// The formats without an AVX-512 kernel here keep their AVX2 ones (a subset of these ISAs): the
// 32-value formats one row at a time, whose per-block float step dominates as for Q8_0; their
// repacked order has sixteen-row matvec kernels (dot_rows_avx512_impl.hpp).
template <bool kVnni>
const detail::DotKernels& avx512_table() {
  static const detail::DotKernels k = [] {
    detail::DotKernels t = detail::dot_kernels_avx2();
    t.f32 = by_nx<Float512Kernel<Load512F32>>;
    t.f16 = by_nx<Float512Kernel<Load512F16>>;
    t.bf16 = by_nx<Float512Kernel<Load512BF16>>;
    t.q8_0 = by_nx<Q8_0Kernel512<kVnni>>;
    t.q4_k = by_nx<Q45KKernel512<kVnni, false>>;
    t.q5_k = by_nx<Q45KKernel512<kVnni, true>>;
    // q6_k (vec_dot order) stays AVX2's: on Zen 4 the 256-bit kernel streams the Q6_K output
    // matrix ~8% faster at 2 threads (bench_matvec cols 2048: 30.5-32.0 against 27.9-30.4 GB/s) and
    // qwen3moe small-preset decode, half of whose bytes are that matrix, runs 4% faster
    // (bench/results/2026-12-04-cpu-lanes-kernels-and-real-shape-zen4.md).
    // q4_k_group4 stays AVX2's (see Q45KKernel512); dense products of many rows take the lanes kernel
    t.q5_k_tiled = by_nx<Q45KKernel512<kVnni, true, detail::DotOrder::tiled>>;
    t.q6_k_tiled = by_nx<Q6KKernel512<kVnni, true>>;
    t.q2_k = by_nx<Q2KKernel512<kVnni, false>>;
    t.q3_k = by_nx<Q3KKernel512<kVnni, false>>;
    t.iq4_xs = by_nx<IQ4XSKernel512<kVnni, false>>;
    t.q2_k_tiled = by_nx<Q2KKernel512<kVnni, true>>;
    t.q3_k_tiled = by_nx<Q3KKernel512<kVnni, true>>;
    t.iq4_xs_tiled = by_nx<IQ4XSKernel512<kVnni, true>>;
    add_repacked_rows512<kVnni>(t);
    t.q4_k_rows = Q4KRows512<kVnni>::run;
    t.q4_k_group4_lanes = Q4KLanes512<kVnni, true>::run;
    t.q4_k_lanes = Q4KLanes512<kVnni, false>::run;
    t.q2_k_tiled_lanes = KQuantLanes512<kVnni, BlockQ2K>::run;
    t.q3_k_tiled_lanes = KQuantLanes512<kVnni, BlockQ3K>::run;
    t.q5_k_tiled_lanes = KQuantLanes512<kVnni, BlockQ5K>::run;
    t.q6_k_tiled_lanes = KQuantLanes512<kVnni, BlockQ6K>::run;
    // Without VNNI the u8·s8 pairs go through maddubs, whose 16-bit sums IQ4_XS's offset levels
    // (up to 241) would saturate.
    if constexpr (kVnni) t.iq4_xs_tiled_lanes = KQuantLanes512<kVnni, BlockIQ4XS>::run;
    return t;
  }();
  return k;
}

}  // namespace
}  // namespace ferry::cpu
