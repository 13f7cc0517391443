#pragma once
// AVX-512 kernels of Q4_K's 4-row order (dot_ref.cpp's dot_q4_k<true>: per 64-value chunk one FMA
// of the chunk's integer sum with d_w·d_y and one of its mins term with dmin_w·d_y), for dense
// products, and of its 1-row order (the same per block), for expert products, with many
// activation rows (prefill). The activations come packed lane-wise
// (detail::pack_q8k_lanes): each vector lane is one activation row, so a weight row's four bytes
// are broadcast against sixteen rows' four bytes and every lane keeps its own whole sum; nothing
// is reduced across lanes. The kernel that reduces each (weight row, activation row, chunk) from
// eight lanes to one before its FMA (dot_avx2.cpp's group4) spends most of its time in those
// reductions. Per lane the arithmetic is the reference's: exact integer sums per chunk, then the
// same two FMA chains, so every result is the 4-row order's bit for bit.
//
// Four weight rows at a time: their levels are unpacked once into a buffer (one byte per value)
// and serve every pack of sixteen activation rows; the four rows are four independent chains of
// vpdpbusd over the same activation vectors. Included by dot_avx512_impl.hpp.
#include <algorithm>
#include <cstring>
#include <vector>

namespace ferry::cpu {
namespace {

// acc + Σ of four u8·s8 products per 32-bit lane.
template <bool kVnni>
inline __m512i dot_u8s8_512(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni)
    return _mm512_dpbusd_epi32(acc, u, s);
  else
    return _mm512_add_epi32(acc,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}

// kGrouped: Q4_K's 4-row order (an FMA pair per 64-value chunk); else its 1-row order
// (dot_ref.cpp's dot_q4_k<false>: the block's whole integer sums, an FMA pair per block), for
// expert products.
template <bool kVnni, bool kGrouped>
struct Q4KLanes512 {
  static constexpr int kRows = detail::kLanesWeightRows;
  static constexpr int kLanes = detail::kLanes;

  // One weight row's block, unpacked: levels 0..15 in value order, the 8 scales as int32, the mins
  // of each chunk's two sub-blocks as one (min_2c, min_2c+1) pair of int16 per chunk, d and dmin.
  struct Unpacked {
    int32_t sc[8];
    int32_t min_pairs[4];
    float d, dmin;
  };

  static void unpack(const BlockQ4K& b, uint8_t* levels, Unpacked& u) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      _mm512_storeu_si512(levels + 64 * c,
                          _mm512_and_si512(join_256(bits, _mm256_srli_epi16(bits, 4)), m4));
    }
    alignas(16) uint8_t sm[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sm), q4k_scales_mins(b.scales));
    for (int j = 0; j < 8; ++j) u.sc[j] = sm[j];
    for (int c = 0; c < 4; ++c) u.min_pairs[c] = sm[8 + 2 * c] | (sm[9 + 2 * c] << 16);
    u.d = h2f(b.d);
    u.dmin = h2f(b.dmin);
  }

  // acc += s·(d_w·d_y), acc_min += m·(dmin_w·d_y), lane-wise: the reference's two FMA chains.
  static void fma_pair(__m512& acc, __m512& acc_min, __m512i s, __m512i m, const Unpacked& u,
                       __m512 dy) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_set1_ps(u.d), dy), acc);
    acc_min =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(_mm512_set1_ps(u.dmin), dy), acc_min);
  }

  // out[j·out_stride + r] for r < nw (≤ kRows) weight rows and j < nx activation rows, the
  // activations packed by pack_q8k_lanes in packs of kLanes rows, pack_stride bytes apart.
  static void run(int64_t n, const void* wv, size_t w_stride, int nw, const uint8_t* packs,
                  size_t pack_stride, int64_t nx, float* out, size_t out_stride) {
    const int64_t nb = n / kQK_K;
    thread_local std::vector<uint8_t> level_buf;
    thread_local std::vector<Unpacked> info_buf;
    level_buf.resize(static_cast<size_t>(kRows * nb * kQK_K));
    info_buf.resize(static_cast<size_t>(kRows * nb));
    const auto* w = static_cast<const uint8_t*>(wv);
    for (int r = 0; r < kRows; ++r) {  // rows past nw repeat row 0 (computed, dropped)
      const auto* row =
          reinterpret_cast<const BlockQ4K*>(w + static_cast<size_t>(r < nw ? r : 0) * w_stride);
      for (int64_t i = 0; i < nb; ++i)
        unpack(row[i], level_buf.data() + (r * nb + i) * kQK_K,
               info_buf[static_cast<size_t>(r * nb + i)]);
    }
    for (int64_t p0 = 0; p0 < nx; p0 += kLanes) {
      const uint8_t* xp = packs + static_cast<size_t>(p0 / kLanes) * pack_stride;
      __m512 acc[kRows], acc_min[kRows];
      for (int r = 0; r < kRows; ++r) acc[r] = acc_min[r] = _mm512_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* xb = xp + i * detail::kLanesBlockBytes;
        const __m512 dy = _mm512_loadu_ps(xb + detail::kLanesDOffset);
        const uint8_t* lv[kRows];
        const Unpacked* u[kRows];
        for (int r = 0; r < kRows; ++r) {
          lv[r] = level_buf.data() + (r * nb + i) * kQK_K;
          u[r] = &info_buf[static_cast<size_t>(r * nb + i)];
        }
        __m512i s_block[kRows], m_block[kRows];  // !kGrouped: the block's sums so far
        for (int c = 0; c < 4; ++c) {
          __m512i s[kRows];
          for (int h = 0; h < 2; ++h) {
            __m512i t[kRows];
            for (int r = 0; r < kRows; ++r) t[r] = _mm512_setzero_si512();
            for (int q = 0; q < 8; ++q) {
              const int g = 16 * c + 8 * h + q;  // values 4g .. 4g+3
              const __m512i a = _mm512_loadu_si512(xb + 64 * g);
              for (int r = 0; r < kRows; ++r) {
                int32_t four;
                std::memcpy(&four, lv[r] + 4 * g, 4);
                t[r] = dot_u8s8_512<kVnni>(t[r], _mm512_set1_epi32(four), a);
              }
            }
            for (int r = 0; r < kRows; ++r) {
              const __m512i scaled =
                  _mm512_mullo_epi32(t[r], _mm512_set1_epi32(u[r]->sc[2 * c + h]));
              s[r] = h == 0 ? scaled : _mm512_add_epi32(s[r], scaled);
            }
          }
          const __m512i bsum_pairs = _mm512_loadu_si512(xb + detail::kLanesBsumOffset + 64 * c);
          for (int r = 0; r < kRows; ++r) {
            const __m512i m = _mm512_madd_epi16(bsum_pairs, _mm512_set1_epi32(u[r]->min_pairs[c]));
            if constexpr (kGrouped) {
              fma_pair(acc[r], acc_min[r], s[r], m, *u[r], dy);
            } else {
              s_block[r] = c == 0 ? s[r] : _mm512_add_epi32(s_block[r], s[r]);
              m_block[r] = c == 0 ? m : _mm512_add_epi32(m_block[r], m);
            }
          }
        }
        if constexpr (!kGrouped)
          for (int r = 0; r < kRows; ++r)
            fma_pair(acc[r], acc_min[r], s_block[r], m_block[r], *u[r], dy);
      }
      const int64_t np = std::min<int64_t>(kLanes, nx - p0);
      for (int r = 0; r < nw; ++r) {
        alignas(64) float res[kLanes];
        _mm512_store_ps(res, _mm512_sub_ps(acc[r], acc_min[r]));
        for (int64_t k = 0; k < np; ++k) out[(p0 + k) * out_stride + r] = res[k];
      }
    }
  }
};

}  // namespace
}  // namespace ferry::cpu
