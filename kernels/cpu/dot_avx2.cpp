// AVX2 + FMA + F16C dot-product kernels (built with those flags; called only after the run-time
// check in isa.cpp). Integer products use maddubs (u8 × s8 → s16 pairs), which cannot saturate
// here: |pair| ≤ 2·63·127 for the 6-bit K-quant levels and 2·128·127 for Q8_0.
#include "kernels/cpu/simd_common.hpp"

namespace ferry::cpu {
namespace {

// ---- float-like weights (F32, F16, BF16): convert 8 values to f32 and FMA.

struct LoadF32 {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static float one(const T* p) { return *p; }
};
struct LoadF16 {
  using T = uint16_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float one(const T* p) { return h2f(*p); }
};
struct LoadBF16 {
  using T = uint16_t;
  static __m256 load(const T* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static float one(const T* p) {
    uint32_t u = uint32_t{*p} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <typename L>
struct FloatKernel {
  using T = typename L::T;
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const T* w = static_cast<const T*>(wv);
    const T* x[NX];
    rows_of(xv, stride, x);
    __m256 acc0[NX], acc1[NX];
    for (int k = 0; k < NX; ++k) acc0[k] = acc1[k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      prefetch_ahead<1>(w + i);  // 32 or 64 bytes per step
      const __m256 w0 = L::load(w + i), w1 = L::load(w + i + 8);
      for (int k = 0; k < NX; ++k) {
        acc0[k] = _mm256_fmadd_ps(w0, L::load(x[k] + i), acc0[k]);
        acc1[k] = _mm256_fmadd_ps(w1, L::load(x[k] + i + 8), acc1[k]);
      }
    }
    for (; i + 8 <= n; i += 8) {
      const __m256 w0 = L::load(w + i);
      for (int k = 0; k < NX; ++k) acc0[k] = _mm256_fmadd_ps(w0, L::load(x[k] + i), acc0[k]);
    }
    for (int k = 0; k < NX; ++k) {
      float s = hsum8(_mm256_add_ps(acc0[k], acc1[k]));
      for (int64_t j = i; j < n; ++j) s += L::one(w + j) * L::one(x[k] + j);
      out[k] = s;
    }
  }
};

// ---- Q8_0 × Q8_0: |w| · sign(x, w) turns the s8×s8 product into maddubs' u8×s8.

struct Q8_0Kernel {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ8_0*>(wv);
    const BlockQ8_0* x[NX];
    rows_of(xv, stride, x);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NX];  // one chain per row, as ggml adds (dot_ref.cpp)
    for (int k = 0; k < NX; ++k) acc[k] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
      prefetch_ahead<1>(w + ib);
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[ib].qs));
      const __m256i aw = _mm256_sign_epi8(qw, qw);
      const float dw = h2f(w[ib].d);
      for (int k = 0; k < NX; ++k) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][ib].qs));
        const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx, qw));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(x[k][ib].d)), p, acc[k]);
      }
    }
    for (int k = 0; k < NX; ++k) out[k] = hsum8(acc[k]);
  }
};

// ---- Q4_K / Q5_K × Q8_K. Per 64-value chunk: the 32 low nibbles (sub-block 2c) and 32 high
// nibbles (2c+1) against 64 consecutive activations; scales applied with madd on the s16 pair
// sums; the mins term is dmin·Σ m_j·(sum of the 32 activations of sub-block j), from bsums.
// Float steps as dot_ref.cpp: Q5_K in 8 lanes, Q4_K per block on the whole integer sum.

// kOrder (dot_ref.cpp): row = Q5_K's 8 lanes / Q4_K's per-block sums; group4 = Q4_K per 64-value
// chunk; tiled = Q5_K per block as the tiled kernel.
template <bool kQ5, detail::DotOrder kOrder = detail::DotOrder::row>
struct Q45KKernel {
  static constexpr bool kGrouped = kOrder == detail::DotOrder::group4;
  using Block = std::conditional_t<kQ5, BlockQ5K, BlockQ4K>;
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const Block*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m1 = _mm256_set1_epi8(1);
    Q45KFloat<kQ5, kOrder, NX> f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const Block& b = w[i];
      prefetch_ahead<3>(&b);  // 144 / 176 bytes
      const __m128i sm = q4k_scales_mins(b.scales);
      const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // 8 × s16, twice
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (kQ5) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
      __m256i sumi[NX];
      __m256i chunk[NX][4];  // kGrouped: the lanes of each 64-value chunk
      for (int k = 0; k < NX; ++k) sumi[k] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i sc_lo = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * c))));
        const __m256i sc_hi = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * c + 1))));
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
        __m256i q_lo = _mm256_and_si256(bits, m4);
        __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if constexpr (kQ5) {
          q_lo = _mm256_or_si256(q_lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), m1), 4));
          q_hi = _mm256_or_si256(q_hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), m1), 4));
        }
        for (int k = 0; k < NX; ++k) {
          const int8_t* y = x[k][i].qs + 64 * c;
          const __m256i y_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
          const __m256i y_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32));
          const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(q_lo, y_lo), sc_lo);
          const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(q_hi, y_hi), sc_hi);
          if constexpr (kGrouped) chunk[k][c] = _mm256_add_epi32(p_lo, p_hi);
          else sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
      const float dw = h2f(b.d), dmw = h2f(b.dmin);
      if constexpr (kGrouped) f.add_chunks(chunk, m16, dw, dmw, x, i);
      else f.add(sumi, m16, dw, dmw, x, i);
    }
    f.store(out);
  }
};

// ---- Q6_K × Q8_K. Levels are used unsigned (0..63); the −32 offset is applied once per block
// as −32·Σ sc_g·bsum_g. Each 32-value group spans two 16-value sub-blocks (two scales).

// Byte shuffles that spread scales (2u, 2u+1) over 8 lanes each.
alignas(16) constexpr uint8_t kQ6ScaleShuffle[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

template <bool kTiled = false>  // kTiled: per block as the tiled kernel (dot_ref.cpp)
struct Q6KKernel {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ6K*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m3 = _mm256_set1_epi8(3);
    Q6KFloat<kTiled, NX> f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockQ6K& b = w[i];
      prefetch_ahead<4>(&b);  // 210 bytes
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      __m256i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)),
            _mm256_or_si256(_mm256_and_si256(l1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4)),
        };
        for (int g = 0; g < 4; ++g) {
          const __m128i shuf = _mm_load_si128(reinterpret_cast<const __m128i*>(kQ6ScaleShuffle[4 * h + g]));
          const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, shuf));
          for (int k = 0; k < NX; ++k) {
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].qs + 128 * h + 32 * g));
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], y), sc));
          }
        }
      }
      f.add(sumi, _mm256_cvtepi8_epi16(sc8), h2f(b.d), x, i);
    }
    f.store(out);
  }
};

constexpr detail::DotKernels kAvx2Base{
    .f32 = by_nx<FloatKernel<LoadF32>>,
    .f16 = by_nx<FloatKernel<LoadF16>>,
    .bf16 = by_nx<FloatKernel<LoadBF16>>,
    .q8_0 = by_nx<Q8_0Kernel>,
    .q4_k = by_nx<Q45KKernel<false>>,
    .q5_k = by_nx<Q45KKernel<true>>,
    .q6_k = by_nx<Q6KKernel<>>,
    .q4_k_group4 = by_nx<Q45KKernel<false, detail::DotOrder::group4>>,
    .q5_k_tiled = by_nx<Q45KKernel<true, detail::DotOrder::tiled>>,
    .q6_k_tiled = by_nx<Q6KKernel<true>>,
};

}  // namespace

const detail::DotKernels& detail::dot_kernels_avx2() {
  static const detail::DotKernels k = [] {
    detail::DotKernels t = kAvx2Base;
    detail::add_legacy_avx2(t);
    detail::add_kquants_avx2(t);
    return t;
  }();
  return k;
}

}  // namespace ferry::cpu
