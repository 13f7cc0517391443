// AVX2 dot products of Q2_K, Q3_K and IQ4_XS with Q8_K activations, bit-exact with
// dot_ref_kquants.cpp in its two orders (vec_dot lanes, tiled). Per 32-value group the weights are
// unpacked once into one register in value order and dotted with up to four activation rows:
// maddubs gives pair sums (|pair| ≤ 2·4·127 for Q2_K/Q3_K, 2·127·127 for IQ4_XS: no saturation),
// madd with the sub-block scales gives the reference's 8 lanes (values 4l..4l+3 of the group).
#include "kernels/cpu/simd_common.hpp"

namespace ferry::cpu {
namespace {

using detail::DotOrder;

// Byte shuffles that spread two 16-bit scales over the 8 int16 lanes of each 128-bit half: for
// group k of a 128-value half whose 8 scales sit in both halves of the source register, the low
// half gets scale 2k (values 0..15 of the group), the high half scale 2k + 1 (values 16..31).
struct ScaleShuffle {
  alignas(32) uint8_t b[4][32];
  constexpr ScaleShuffle() : b() {
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 32; ++i) b[k][i] = static_cast<uint8_t>(4 * k + 2 * (i / 16) + i % 2);
  }
};
constexpr ScaleShuffle kScaleShuffle{};

inline __m256i scale_pair(__m256i scales8x2, int k) {
  return _mm256_shuffle_epi8(scales8x2, _mm256_load_si256(reinterpret_cast<const __m256i*>(kScaleShuffle.b[k])));
}

// The two 128-value halves' scales (16 × int16 in) as [half h, half h].
inline void split_scales(__m256i sc16, __m256i (&out)[2]) {
  out[0] = _mm256_permute2x128_si256(sc16, sc16, 0x00);
  out[1] = _mm256_permute2x128_si256(sc16, sc16, 0x11);
}

template <bool kTiled>
struct Q2KKernel {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ2K*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    KFloat<true, kTiled, NX> f;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockQ2K& b = w[i];
      prefetch_ahead<2>(&b);  // 84 bytes
      const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
      __m256i scales[2];
      split_scales(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m4)), scales);
      __m256i sumi[NX], mins[NX];
      for (int k = 0; k < NX; ++k) {
        sumi[k] = _mm256_setzero_si256();
        mins[k] = _mm256_madd_epi16(mins16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].bsums)));
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
        for (int g = 0; g < 4; ++g) {
          const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
          const __m256i sc = scale_pair(scales[h], g);
          for (int k = 0; k < NX; ++k) {
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].qs + 128 * h + 32 * g));
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q, y)));
          }
        }
      }
      f.add(sumi, mins, h2f(b.d), h2f(b.dmin), x, i);
    }
    f.store(out);
  }
};

template <bool kTiled>
struct Q3KKernel {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockQ3K*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m1 = _mm256_set1_epi8(1);
    const __m256i four = _mm256_set1_epi8(4);
    KFloat<false, kTiled, NX> f;
    const __m256i none[NX] = {};
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockQ3K& b = w[i];
      prefetch_ahead<2>(&b);  // 110 bytes
      __m256i scales[2];
      split_scales(q3k_scales16(b), scales);
      const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
      __m256i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
        for (int g = 0; g < 4; ++g) {
          // level = q | hbit << 2, minus 4: in [−4, 3]
          const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, 4 * h + g), m1);
          const __m256i q = _mm256_sub_epi8(
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3), _mm256_slli_epi16(hb, 2)), four);
          const __m256i aq = _mm256_sign_epi8(q, q);
          const __m256i sc = scale_pair(scales[h], g);
          for (int k = 0; k < NX; ++k) {
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].qs + 128 * h + 32 * g));
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(sc, _mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q))));
          }
        }
      }
      f.add(sumi, none, h2f(b.d), 0, x, i);
    }
    f.store(out);
  }
};

template <bool kTiled>
struct IQ4XSKernel {
  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    const auto* w = static_cast<const BlockIQ4XS*>(wv);
    const BlockQ8K* x[NX];
    rows_of(xv, stride, x);
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    KFloat<false, kTiled, NX> f;
    const __m256i none[NX] = {};
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      const BlockIQ4XS& b = w[i];
      prefetch_ahead<3>(&b);  // 136 bytes
      __m256i sumi[NX];
      for (int k = 0; k < NX; ++k) sumi[k] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * s));
        const __m256i q = _mm256_set_m128i(_mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                                           _mm_shuffle_epi8(values, _mm_and_si128(bits, m4)));
        const __m256i aq = _mm256_sign_epi8(q, q);
        const __m256i ls = _mm256_set1_epi16(static_cast<short>(iq4xs_scale(b, s)));
        for (int k = 0; k < NX; ++k) {
          const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].qs + 32 * s));
          sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), ls));
        }
      }
      f.add(sumi, none, h2f(b.d), 0, x, i);
    }
    f.store(out);
  }
};

}  // namespace

void detail::add_kquants_avx2(DotKernels& k) {
  k.q2_k = by_nx<Q2KKernel<false>>;
  k.q3_k = by_nx<Q3KKernel<false>>;
  k.iq4_xs = by_nx<IQ4XSKernel<false>>;
  k.q2_k_tiled = by_nx<Q2KKernel<true>>;
  k.q3_k_tiled = by_nx<Q3KKernel<true>>;
  k.iq4_xs_tiled = by_nx<IQ4XSKernel<true>>;
}

}  // namespace ferry::cpu
