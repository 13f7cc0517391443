// AVX2 dot products of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4), bit-exact with
// dot_ref_legacy.cpp in each of its orders. A block's 32 levels are unpacked once into one register
// in value order (low nibbles of qs, then high nibbles) and dotted with up to four activation rows;
// the 8 int32 lanes of madd(maddubs(·), 1) are the reference's lane sums (products 4l..4l+3), exact.
// Signed levels use |w| · sign(x, w) for maddubs' u8 × s8 form (|pair| ≤ 2·127·127 < 2^15).
#include <cmath>

#include "kernels/cpu/simd_common.hpp"

namespace ferry::cpu {
namespace {

using detail::DotOrder;

// Bytes 0..15: the low nibbles of the 16 bytes at qs; 16..31: the high nibbles.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of the little-endian 32-bit word at p is set, else 0.
inline __m256i bits_to_bytes(const uint8_t* p) {
  uint32_t h;
  std::memcpy(&h, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

inline __m256i lut16(const int8_t* table, __m256i idx) {
  const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm256_shuffle_epi8(t, idx);
}

// Weight formats: levels (value order; signed unless kSigned is false), scale, activation type.
struct Q4_0W {
  using Block = BlockQ4_0;
  using Act = BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i levels(const Block& b) { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct Q5_0W {
  using Block = BlockQ5_0;
  using Act = BlockQ8_0;
  static constexpr bool kSigned = true;
  // A clear fifth bit makes the byte q | 0xF0 = q − 16 as int8.
  static __m256i levels(const Block& b) {
    return _mm256_or_si256(nibbles(b.qs), _mm256_andnot_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0))));
  }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct Q4_1W {
  using Block = BlockQ4_1;
  using Act = BlockQ8_1;
  static constexpr bool kSigned = false;
  static __m256i levels(const Block& b) { return nibbles(b.qs); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct Q5_1W {
  using Block = BlockQ5_1;
  using Act = BlockQ8_1;
  static constexpr bool kSigned = false;
  static __m256i levels(const Block& b) {
    return _mm256_or_si256(nibbles(b.qs), _mm256_and_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(0x10)));
  }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct IQ4NLW {
  using Block = BlockIQ4NL;
  using Act = BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i levels(const Block& b) { return lut16(kIq4nlValues, nibbles(b.qs)); }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct MXFP4W {
  using Block = BlockMXFP4;
  using Act = BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i levels(const Block& b) { return lut16(kMxfp4Values, nibbles(b.qs)); }
  static float scale(const Block& b) { return e8m0_to_fp32_half(b.e); }
};

// ---- The float steps (dot_ref_legacy.cpp), for NX rows. add() gets a block's lane sums per row.

// vec_dot of Q4_0/Q5_0/Q4_1/Q5_1, tinyBLAS of IQ4_NL: one 8-lane FMA chain per row; Q4_1/Q5_1 add
// the min term in a scalar chain.
template <typename W, int NX>
struct Lanes {
  static constexpr bool kMin = !W::kSigned;
  __m256 acc[NX];
  float mins[NX];
  Lanes() {
    for (int k = 0; k < NX; ++k) {
      acc[k] = _mm256_setzero_ps();
      mins[k] = 0;
    }
  }
  template <int kSlot>
  void add(int64_t i, const __m256i (&p)[NX], const typename W::Block& b, const typename W::Act* const (&x)[NX]) {
    const float dw = W::scale(b);
    for (int k = 0; k < NX; ++k) {
      if constexpr (kMin) mins[k] = std::fma(h2f(b.m), h2f(x[k][i].s), mins[k]);
      acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(x[k][i].d)), _mm256_cvtepi32_ps(p[k]), acc[k]);
    }
  }
  void store(float* out) const {
    for (int k = 0; k < NX; ++k) out[k] = kMin ? hsum8(acc[k]) + mins[k] : hsum8(acc[k]);
  }
};

// vec_dot of IQ4_NL/MXFP4: even and odd blocks in two chains (kSlot 0 and 1), an odd last block
// (kSlot 2) added in scalar after the hsum.
template <typename W, int NX>
struct Pairs {
  __m256 acc[2][NX];
  bool has_tail = false;
  float tail_d[NX] = {};
  int32_t tail_s[NX] = {};
  Pairs() {
    for (int k = 0; k < NX; ++k) acc[0][k] = acc[1][k] = _mm256_setzero_ps();
  }
  template <int kSlot>
  void add(int64_t i, const __m256i (&p)[NX], const typename W::Block& b, const typename W::Act* const (&x)[NX]) {
    const float dw = W::scale(b);
    if constexpr (kSlot == 2) {
      alignas(16) int32_t t[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(t), hsum_rows<NX>(p));
      for (int k = 0; k < NX; ++k) {
        tail_s[k] = t[k];
        tail_d[k] = h2f(x[k][i].d) * dw;
      }
      has_tail = true;
    } else {
      for (int k = 0; k < NX; ++k)
        acc[kSlot][k] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[k][i].d) * dw), _mm256_cvtepi32_ps(p[k]), acc[kSlot][k]);
    }
  }
  void store(float* out) const {
    for (int k = 0; k < NX; ++k) {
      float s = hsum8(_mm256_add_ps(acc[0][k], acc[1][k]));
      if (has_tail) s = std::fma(tail_d[k], static_cast<float>(tail_s[k]), s);
      out[k] = s;
    }
  }
};

// The repacked gemv/gemm: one scalar chain per row, rows in the lanes of one register.
template <typename W, int NX>
struct Chain {
  __m128 acc = _mm_setzero_ps();
  template <int kSlot>
  void add(int64_t i, const __m256i (&p)[NX], const typename W::Block& b, const typename W::Act* const (&x)[NX]) {
    alignas(16) float dy[4] = {0, 0, 0, 0};
    for (int k = 0; k < NX; ++k) dy[k] = h2f(x[k][i].d);
    const __m128 d = _mm_mul_ps(_mm_set1_ps(W::scale(b)), _mm_load_ps(dy));
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum_rows<NX>(p)), d, acc);
  }
  void store(float* out) const { store_rows<NX>(acc, out); }
};

template <typename W, template <typename, int> class Order>
struct LegacyKernel {
  // Block i: its levels dotted with the NX rows, handed to the float side as slot kSlot (0/1:
  // even/odd block of a pair, 2: an odd last block).
  template <int kSlot, int NX>
  static void block(Order<W, NX>& f, const typename W::Block* w, const typename W::Act* const (&x)[NX], int64_t i) {
    prefetch_ahead<1>(w + i);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i q = W::levels(w[i]);
    __m256i p[NX];
    if constexpr (W::kSigned) {
      const __m256i aq = _mm256_sign_epi8(q, q);
      for (int k = 0; k < NX; ++k) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].qs));
        p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), ones);
      }
    } else {
      for (int k = 0; k < NX; ++k) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].qs));
        p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones);
      }
    }
    f.template add<kSlot>(i, p, w[i], x);
  }

  template <int NX>
  static void run(int64_t n, const void* wv, const void* xv, size_t stride, float* out) {
    using Act = typename W::Act;
    const auto* w = static_cast<const typename W::Block*>(wv);
    const Act* x[NX];
    rows_of(xv, stride, x);
    const int64_t nb = n / kQK8_0;
    Order<W, NX> f;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
      block<0>(f, w, x, i);
      block<1>(f, w, x, i + 1);
    }
    if (i < nb) block<2>(f, w, x, i);
    f.store(out);
  }
};

}  // namespace

void detail::add_legacy_avx2(DotKernels& k) {
  k.q4_0 = by_nx<LegacyKernel<Q4_0W, Lanes>>;
  k.q4_1 = by_nx<LegacyKernel<Q4_1W, Lanes>>;
  k.q5_0 = by_nx<LegacyKernel<Q5_0W, Lanes>>;
  k.q5_1 = by_nx<LegacyKernel<Q5_1W, Lanes>>;
  k.iq4_nl = by_nx<LegacyKernel<IQ4NLW, Pairs>>;
  k.mxfp4 = by_nx<LegacyKernel<MXFP4W, Pairs>>;
  k.q4_0_repacked = by_nx<LegacyKernel<Q4_0W, Chain>>;
  k.iq4_nl_repacked = by_nx<LegacyKernel<IQ4NLW, Chain>>;
  k.mxfp4_repacked = by_nx<LegacyKernel<MXFP4W, Chain>>;
  k.iq4_nl_tinyblas = by_nx<LegacyKernel<IQ4NLW, Lanes>>;
}

}  // namespace ferry::cpu
