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

// The weight rows of one lanes-kernel call, unpacked once (shared by the Q4_K and the tiled-order
// kernels): kLanesWeightRows rows of nb blocks (rows past nw repeat row 0: computed, dropped),
// each block's levels as one byte per value and its Info, made by unpack(block, levels, info).
template <typename Info>
struct LaneRows {
  static constexpr int kRows = detail::kLanesWeightRows;
  int64_t nb;
  const uint8_t* level_data;
  const Info* info_data;

  template <typename Block, typename Unpack>
  static LaneRows make(int64_t nb, const void* w, size_t w_stride, int nw, Unpack unpack) {
    thread_local std::vector<uint8_t> levels;
    thread_local std::vector<Info> info;
    levels.resize(static_cast<size_t>(kRows * nb * kQK_K));
    info.resize(static_cast<size_t>(kRows * nb));
    for (int r = 0; r < kRows; ++r) {
      const auto* row = reinterpret_cast<const Block*>(
          static_cast<const uint8_t*>(w) + static_cast<size_t>(r < nw ? r : 0) * w_stride);
      for (int64_t i = 0; i < nb; ++i)
        unpack(row[i], levels.data() + (r * nb + i) * kQK_K, info[static_cast<size_t>(r * nb + i)]);
    }
    return LaneRows{nb, levels.data(), info.data()};
  }

  // Block i of every row: its levels and its Info.
  void block(int64_t i, const uint8_t* (&lv)[kRows], const Info* (&u)[kRows]) const {
    for (int r = 0; r < kRows; ++r) {
      lv[r] = level_data + (r * nb + i) * kQK_K;
      u[r] = info_data + r * nb + i;
    }
  }
};

// t[r] = Σ over the groups of four values g0 .. g0 + kCount − 1 of a block of row r's levels ·
// the packed activations xb (one activation row a lane): exact integers.
template <bool kVnni, int kCount>
inline void dot_groups(const uint8_t* xb, const uint8_t* const (&lv)[detail::kLanesWeightRows],
                       int g0, __m512i (&t)[detail::kLanesWeightRows]) {
  for (int r = 0; r < detail::kLanesWeightRows; ++r) t[r] = _mm512_setzero_si512();
  for (int g = g0; g < g0 + kCount; ++g) {
    const __m512i a = _mm512_loadu_si512(xb + 64 * g);
    for (int r = 0; r < detail::kLanesWeightRows; ++r) {
      int32_t four;
      std::memcpy(&four, lv[r] + 4 * g, 4);
      t[r] = dot4_u8s8<kVnni>(t[r], _mm512_set1_epi32(four), a);
    }
  }
}

// out[(p0 + k)·out_stride + r] = lane k of v, for the pack's np activation rows.
inline void store_lanes(__m512 v, int r, int64_t p0, int64_t np, float* out, size_t out_stride) {
  alignas(64) float res[detail::kLanes];
  _mm512_store_ps(res, v);
  for (int64_t k = 0; k < np; ++k) out[(p0 + k) * out_stride + r] = res[k];
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
    for (int c = 0; c < 4; ++c)
      _mm512_storeu_si512(levels + 64 * c, q45k_chunk_levels<false>(b, c, _mm256_setzero_si256()));
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
    const auto rows =
        LaneRows<Unpacked>::template make<BlockQ4K>(n / kQK_K, wv, w_stride, nw, unpack);
    for (int64_t p0 = 0; p0 < nx; p0 += kLanes) {
      const uint8_t* xp = packs + static_cast<size_t>(p0 / kLanes) * pack_stride;
      __m512 acc[kRows], acc_min[kRows];
      for (int r = 0; r < kRows; ++r) acc[r] = acc_min[r] = _mm512_setzero_ps();
      for (int64_t i = 0; i < rows.nb; ++i) {
        const uint8_t* xb = xp + i * detail::kLanesBlockBytes;
        const __m512 dy = _mm512_loadu_ps(xb + detail::kLanesDOffset);
        const uint8_t* lv[kRows];
        const Unpacked* u[kRows];
        rows.block(i, lv, u);
        __m512i s_block[kRows], m_block[kRows];  // !kGrouped: the block's sums so far
        for (int c = 0; c < 4; ++c) {
          __m512i s[kRows];
          for (int h = 0; h < 2; ++h) {  // sub-block 2c + h: groups of four 16c + 8h .. + 7
            __m512i t[kRows];
            dot_groups<kVnni, 8>(xb, lv, 16 * c + 8 * h, t);
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
      for (int r = 0; r < nw; ++r)
        store_lanes(_mm512_sub_ps(acc[r], acc_min[r]), r, p0, np, out, out_stride);
    }
  }
};

}  // namespace
}  // namespace ferry::cpu
