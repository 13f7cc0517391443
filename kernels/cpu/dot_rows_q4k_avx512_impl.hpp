#pragma once
// AVX-512 matvec kernel of Q4_K in its 1-row order (ggml's repacked q4_K_8x8 gemv, dot_ref.cpp's
// dot_q4_k<false>: per block and row one FMA of the whole integer sum with d_w·d_y and one of the
// integer mins term with dmin_w·d_y, on two chains; the result is their difference), four weight
// rows at a time (detail::DotRowsFn), with up to kMaxNx activation rows. Included by
// dot_avx512_impl.hpp after Q45KKernel512, whose integer part this repeats per row.
//
// Why four rows: one row at a time, each 144-byte block ends in a horizontal sum of the scale
// term, another of the mins term and a dependent FMA pair, which cost about as much as the 256
// products. Here the four rows' sums are reduced together (one hadd tree gives lane r = row r) and
// one 4-lane FMA per chain serves all four; lane-wise the arithmetic is the reference's, so every
// result is the 1-row kernel's bit for bit. The four rows follow each other in memory, so the
// group is prefetched as one linear stream a fixed distance ahead (as the sixteen-row kernels do).
#include <algorithm>
#include <cstring>

namespace ferry::cpu {
namespace {

template <bool kVnni>
struct Q4KRows512 {
  static constexpr int kGroup = 4;
  // Bytes ahead of a group's linear read position that the prefetch runs.
  static constexpr size_t kAheadBytes = 4096;

  // q4k_scales_mins of the four rows' block i at once: their three scale words side by side
  // (a 4x4 transpose), the 6-bit fields unpacked lane-wise, and transposed back.
  static void scales_mins_x4(const BlockQ4K* const row[kGroup], int64_t i, __m128i out[kGroup]) {
    __m128i w[kGroup];
    // 16 bytes from the 12 scale bytes: the 4 after them are the block's first quants (unused).
    for (int r = 0; r < kGroup; ++r) w[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r][i].scales));
    const __m128i t01l = _mm_unpacklo_epi32(w[0], w[1]), t23l = _mm_unpacklo_epi32(w[2], w[3]);
    const __m128i t01h = _mm_unpackhi_epi32(w[0], w[1]), t23h = _mm_unpackhi_epi32(w[2], w[3]);
    const __m128i u0 = _mm_unpacklo_epi64(t01l, t23l), u1 = _mm_unpackhi_epi64(t01l, t23l);
    const __m128i u2 = _mm_unpacklo_epi64(t01h, t23h);
    const __m128i k1 = _mm_set1_epi32(0x3f3f3f3f), k2 = _mm_set1_epi32(0x0f0f0f0f), k3 = _mm_set1_epi32(0x03030303);
    const __m128i sl = _mm_and_si128(u0, k1), ml = _mm_and_si128(u1, k1);
    const __m128i sh =
        _mm_or_si128(_mm_and_si128(u2, k2), _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u0, 6), k3), 4));
    const __m128i mh = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(u2, 4), k2),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u1, 6), k3), 4));
    // Row r: [sl, sh, ml, mh] of lane r, as q4k_scales_mins returns them.
    const __m128i a = _mm_unpacklo_epi32(sl, sh), b = _mm_unpackhi_epi32(sl, sh);
    const __m128i c = _mm_unpacklo_epi32(ml, mh), d = _mm_unpackhi_epi32(ml, mh);
    out[0] = _mm_unpacklo_epi64(a, c);
    out[1] = _mm_unpackhi_epi64(a, c);
    out[2] = _mm_unpacklo_epi64(b, d);
    out[3] = _mm_unpackhi_epi64(b, d);
  }

  template <int NX>
  static void run_nx(int64_t n, const uint8_t* w, size_t w_stride, int nw, const void* xv, size_t x_stride,
                     float* out, size_t out_stride) {
    const BlockQ8K* x[NX];
    rows_of(xv, x_stride, x);
    const int64_t nb = n / kQK_K;
    // d, dmin of four rows as 8 halves → d of rows 0..3 in the low 128 bits, dmin in the high.
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int g = 0; g < nw; g += kGroup) {
      const int ng = std::min(kGroup, nw - g);
      const BlockQ4K* row[kGroup];  // rows past nw repeat the group's first (computed, dropped)
      for (int r = 0; r < kGroup; ++r)
        row[r] = reinterpret_cast<const BlockQ4K*>(w + static_cast<size_t>(g + (r < ng ? r : 0)) * w_stride);
      const char* ahead = reinterpret_cast<const char*>(w + static_cast<size_t>(g) * w_stride) + kAheadBytes;
      __m128 acc[NX], acc_min[NX];  // lane r: row g + r
      for (int k = 0; k < NX; ++k) acc[k] = acc_min[k] = _mm_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        for (int l = 0; l < kGroup * static_cast<int>(sizeof(BlockQ4K)) / 64; ++l)  // 9 lines per block step
          _mm_prefetch(ahead + i * kGroup * sizeof(BlockQ4K) + 64 * l, _MM_HINT_T0);
        __m256i s8[NX][kGroup];
        __m128i mins[kGroup];  // row r: its 8 mins as s16
        __m128i sms[kGroup];
        scales_mins_x4(row, i, sms);
        for (int r = 0; r < kGroup; ++r) {
          const BlockQ4K& b = row[r][i];
          const __m128i sm = sms[r];
          const __m512i sc8 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
          __m512i sumi[NX];
          for (int k = 0; k < NX; ++k) sumi[k] = _mm512_setzero_si512();
          for (int c = 0; c < 4; ++c) {
            const __m512i sc = _mm512_permutexvar_epi16(load_index(kScaleIndex.q4k[c]), sc8);
            const __m512i q = q45k_chunk_levels<false>(b, c, _mm256_setzero_si256());
            for (int k = 0; k < NX; ++k) {
              const __m512i y = _mm512_loadu_si512(x[k][i].qs + 64 * c);
              sumi[k] = dot_s16<kVnni>(sumi[k], _mm512_maddubs_epi16(q, y), sc);
            }
          }
          for (int k = 0; k < NX; ++k) s8[k][r] = fold_512(sumi[k]);
          mins[r] = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        }
        // The rows' (d, dmin) words in registers (not through memory: four 4-byte stores read back
        // as one 16-byte load cannot be forwarded and stall).
        auto dm_word = [&](int r) {
          int32_t v;
          std::memcpy(&v, &row[r][i].d, 4);
          return _mm_cvtsi32_si128(v);
        };
        const __m128i dm = _mm_unpacklo_epi64(_mm_unpacklo_epi32(dm_word(0), dm_word(1)),
                                              _mm_unpacklo_epi32(dm_word(2), dm_word(3)));
        const __m256 dmf = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(dm), split);
        const __m128 dw = _mm256_castps256_ps128(dmf), dmw = _mm256_extractf128_ps(dmf, 1);
        for (int k = 0; k < NX; ++k) {
          const BlockQ8K& y = x[k][i];
          const __m128i s = hsum_i32_x4(s8[k][0], s8[k][1], s8[k][2], s8[k][3]);
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
          const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
          const __m128i m = _mm_hadd_epi32(_mm_hadd_epi32(_mm_madd_epi16(mins[0], pairs), _mm_madd_epi16(mins[1], pairs)),
                                           _mm_hadd_epi32(_mm_madd_epi16(mins[2], pairs), _mm_madd_epi16(mins[3], pairs)));
          const __m128 dy = _mm_set1_ps(y.d);
          acc[k] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(dw, dy), acc[k]);
          acc_min[k] = _mm_fmadd_ps(_mm_cvtepi32_ps(m), _mm_mul_ps(dmw, dy), acc_min[k]);
        }
      }
      for (int k = 0; k < NX; ++k) {
        alignas(16) float res[kGroup];
        _mm_store_ps(res, _mm_sub_ps(acc[k], acc_min[k]));
        for (int r = 0; r < ng; ++r) out[k * out_stride + g + r] = res[r];
      }
    }
  }

  static void run(int64_t n, const void* w, size_t w_stride, int nw, const void* x, size_t x_stride, int nx,
                  float* out, size_t out_stride) {
    const auto* wb = static_cast<const uint8_t*>(w);
    with_nx(nx, [&](auto k) { run_nx<k()>(n, wb, w_stride, nw, x, x_stride, out, out_stride); });
  }
};

}  // namespace
}  // namespace ferry::cpu
