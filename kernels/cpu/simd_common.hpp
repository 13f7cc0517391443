#pragma once
// Helpers for the ISA-specific kernel files (dot_avx2.cpp, dot_avx512*.cpp, dequant_avx2.cpp).
//
// Everything here lives in an anonymous namespace on purpose: each ISA file is compiled with
// different -m flags, and an inline function or template shared by name across them could be
// merged by the linker into one copy that uses instructions the running CPU lacks.
// GCC 12's AVX-512 headers build _mm*_undefined_* as `__m256d __Y = __Y;`, which its own
// -Wmaybe-uninitialized flags once inlined (GCC bug 105593, fixed in 13); the state at the
// header's lines is what counts, so the suppression wraps the include.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_kernels.hpp"

namespace ferry::cpu {
namespace {

// Software prefetch of the weight stream, this many bytes ahead of the block being computed. The
// hardware prefetchers alone leave matvec at ~60% of DRAM bandwidth on the H200 host; with this
// it reaches the streaming-read figure (bench/results/2026-11-29-matvec-cpu.md). Prefetches past
// the end of a matrix are harmless (no fault).
inline constexpr int kPrefetchBytes = 2048;

// Prefetches the `lines` cache lines starting kPrefetchBytes after p.
template <int kLines>
inline void prefetch_ahead(const void* p) {
  for (int l = 0; l < kLines; ++l)
    _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes + 64 * l, _MM_HINT_T0);
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum4(__m128 r) {
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline float hsum8(__m256 v) {
  return hsum4(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K/Q5_K block, unpacked from
// the 12-byte field with 32-bit masks (same result as scale_min_k4 for j = 0..7).
inline void unpack_q4k_scales(const uint8_t* s12, uint8_t* out16) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, s12, 12);
  u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t uaux = u[1] & kmask1;
  u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  u[2] = uaux;
  u[0] &= kmask1;
  std::memcpy(out16, u, 16);
}

// Same unpacking into a register: bytes 0..7 scales, 8..15 mins. Built from general registers
// (no store to memory and reload, which would stall on store forwarding in the hot loop).
inline __m128i q4k_scales_mins(const uint8_t* s12) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, s12, 12);
  const uint32_t mins_hi = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t scales_hi = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  return _mm_set_epi32(static_cast<int>(mins_hi), static_cast<int>(u[1] & kmask1),
                       static_cast<int>(scales_hi), static_cast<int>(u[0] & kmask1));
}

// The 16 scales of a Q3_K block minus 32 as int16 (q3k_scales), unpacked in a vector register: the
// three scale words a0, a1, a2 give scale bytes 4j..4j+3 as (a_{j%2} >> 4·(j/2)) & 0x0f with bits
// 4-5 from (a2 >> 2j) & 3.
inline __m256i q3k_scales16(const BlockQ3K& b) {
  // 16 bytes that end with the 12 scale bytes (the 4 before them are the block's last quants), so
  // the load stays inside the block; shifted down, the words are a0, a1, a2, 0.
  const __m128i v =
      _mm_srli_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales - 4)), 4);
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)),
                                                  _mm_setr_epi32(0, 0, 4, 4)),
                                   _mm_set1_epi32(0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)),
                                                  _mm_setr_epi32(0, 2, 4, 6)),
                                   _mm_set1_epi32(0x03030303));
  const __m128i s = _mm_or_si128(lo, _mm_slli_epi32(hi, 4));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(s, _mm_set1_epi8(32)));
}

// The four chunk sums of one Q4_K block in one register: lane c = Σ of the int32 lanes of p[c].
inline __m128i hsum_i32_x4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// The per-chunk mins terms of Q4_K for one activation block: lane c = m_2c·(sum of sub-block 2c)
// + m_2c+1·(sum of sub-block 2c+1) (|sum of 32| ≤ 32·127 fits int16). mins16: 8 × s16.
inline __m128i q4k_mins_chunks(__m128i mins16, const int16_t* bsums) {
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
  const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
  return _mm_madd_epi16(mins16, q8s);
}

// ---- The float steps of the orders that take one FMA per block (or 64-value chunk) and row
// (dot_ref.cpp), done for the kernel's up to 4 activation rows at once: lane k of each register
// belongs to row k (lanes ≥ NX are zero and unused). Lane-wise the arithmetic is the scalar
// reference's, so results stay bit-identical.

// Lane k: Σ of the int32 lanes of v[k].
template <int NX>
inline __m128i hsum_rows(const __m256i (&v)[NX]) {
  const __m256i z = _mm256_setzero_si256();
  return hsum_i32_x4(v[0], NX > 1 ? v[1 % NX] : z, NX > 2 ? v[2 % NX] : z, NX > 3 ? v[3 % NX] : z);
}

// Lane k: the whole-block Q4_K/Q5_K mins term of row k's activation block i.
template <int NX>
inline __m128i mins_rows(__m128i mins16, const BlockQ8K* const (&x)[NX], int64_t i) {
  __m128i m[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
  for (int k = 0; k < NX; ++k) m[k] = q4k_mins_chunks(mins16, x[k][i].bsums);
  return _mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]));
}

// out[c], lane k: the Q4_K mins term of chunk c of row k's activation block i.
template <int NX>
inline void mins_rows_chunks(__m128i mins16, const BlockQ8K* const (&x)[NX], int64_t i, __m128i (&out)[4]) {
  __m128 r[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (int k = 0; k < NX; ++k) r[k] = _mm_castsi128_ps(q4k_mins_chunks(mins16, x[k][i].bsums));
  _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
  for (int c = 0; c < 4; ++c) out[c] = _mm_castps_si128(r[c]);
}

// Lane k: d of row k's activation block i.
template <int NX>
inline __m128 dy_rows(const BlockQ8K* const (&x)[NX], int64_t i) {
  alignas(16) float d[4] = {0, 0, 0, 0};
  for (int k = 0; k < NX; ++k) d[k] = x[k][i].d;
  return _mm_load_ps(d);
}

template <int NX>
inline void store_rows(__m128 v, float* out) {
  alignas(16) float t[4];
  _mm_store_ps(t, v);
  for (int k = 0; k < NX; ++k) out[k] = t[k];
}

// ggml's tiled kernel (Q5_K/Q6_K products of 8+ rows), one block: r = d_w·s, then r − dmin_w·m
// fused when the type has mins, then fma(r, d_y, acc).
template <bool kHasMin>
inline __m128 tiled_step(__m128 acc, __m128i s, __m128i m, float dw, float dmw, __m128 dy) {
  __m128 r = _mm_mul_ps(_mm_set1_ps(dw), _mm_cvtepi32_ps(s));
  if constexpr (kHasMin) r = _mm_fnmadd_ps(_mm_set1_ps(dmw), _mm_cvtepi32_ps(m), r);
  return _mm_fmadd_ps(r, dy, acc);
}

// Q5_K's mins term as ggml's vec_dot adds it, fma(−d_y·dmin_w, mins, sum), for one row.
inline float q5k_add_mins(float sum, __m128i mins_chunks, float dmw, float dy) {
  __m128i v = _mm_add_epi32(mins_chunks, _mm_unpackhi_epi64(mins_chunks, mins_chunks));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  const float m = static_cast<float>(_mm_cvtsi128_si32(v));
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(-dy * dmw), _mm_set_ss(m), _mm_set_ss(sum)));
}

// The float side of the Q4_K / Q5_K kernels (both ISA files), in the orders of dot_ref.cpp.
// Per block add() (or add_chunks() for Q4_K's 4-row order) with the block's 8 mins as s16, its d
// and dmin; then store(out).
template <bool kQ5, detail::DotOrder kOrder, int NX>
struct Q45KFloat {
  static constexpr bool kGrouped = kOrder == detail::DotOrder::group4;
  static constexpr bool kTiled = kOrder == detail::DotOrder::tiled;
  static constexpr bool kLanes = kQ5 && !kTiled;  // Q5_K's vec_dot: 8 lanes per row
  __m256 acc[NX];                                   // kLanes
  float mins[NX];                                   // kLanes: the mins term
  __m128 vacc = _mm_setzero_ps(), vacc_min = _mm_setzero_ps();  // the other orders, lane k = row k

  Q45KFloat() {
    for (int k = 0; k < NX; ++k) {
      acc[k] = _mm256_setzero_ps();
      mins[k] = 0;
    }
  }

  // One block: the rows' 8-lane integer sums (the row, tiled and Q5_K lane orders).
  void add(const __m256i (&sums)[NX], __m128i m16, float dw, float dmw, const BlockQ8K* const (&x)[NX],
           int64_t i) {
    static_assert(!kGrouped);
    if constexpr (kLanes) {
      for (int k = 0; k < NX; ++k) {
        const BlockQ8K& y = x[k][i];
        mins[k] = q5k_add_mins(mins[k], q4k_mins_chunks(m16, y.bsums), dmw, y.d);
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y.d), _mm256_cvtepi32_ps(sums[k]), acc[k]);
      }
    } else if constexpr (kTiled) {
      vacc = tiled_step<true>(vacc, hsum_rows<NX>(sums), mins_rows<NX>(m16, x, i), dw, dmw, dy_rows<NX>(x, i));
    } else {
      const __m128 dy = dy_rows<NX>(x, i);
      vacc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum_rows<NX>(sums)), _mm_mul_ps(_mm_set1_ps(dw), dy), vacc);
      vacc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(mins_rows<NX>(m16, x, i)), _mm_mul_ps(_mm_set1_ps(dmw), dy), vacc_min);
    }
  }

  // One block in Q4_K's 4-row order: chunk[k][c] holds the 8-lane sums of row k's chunk c.
  void add_chunks(const __m256i (&chunk)[NX][4], __m128i m16, float dw, float dmw,
                  const BlockQ8K* const (&x)[NX], int64_t i) {
    static_assert(kGrouped);
    const __m128 dy = dy_rows<NX>(x, i);
    const __m128 d = _mm_mul_ps(_mm_set1_ps(dw), dy), dmin = _mm_mul_ps(_mm_set1_ps(dmw), dy);
    __m128i mc[4];
    mins_rows_chunks<NX>(m16, x, i, mc);
    for (int c = 0; c < 4; ++c) {
      __m256i col[NX];
      for (int k = 0; k < NX; ++k) col[k] = chunk[k][c];
      vacc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum_rows<NX>(col)), d, vacc);
      vacc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(mc[c]), dmin, vacc_min);
    }
  }

  void store(float* out) const {
    if constexpr (kLanes) {
      for (int k = 0; k < NX; ++k) out[k] = hsum8(acc[k]) + mins[k];
    } else {
      store_rows<NX>(kTiled ? vacc : _mm_sub_ps(vacc, vacc_min), out);
    }
  }
};

// The float side of the Q6_K kernels (both ISA files), in the orders of dot_ref.cpp. Per block:
// add(sums, sc16, dw, x, i) with the rows' 8-lane sums of sc·q·y (levels unsigned) and the
// block's 16 scales as s16; then store(out).
template <bool kTiled, int NX>
struct Q6KFloat {
  __m256 acc[NX];                  // vec_dot: 8 lanes per row
  __m128 vacc = _mm_setzero_ps();  // kTiled, lane k = row k

  Q6KFloat() {
    for (int k = 0; k < NX; ++k) acc[k] = _mm256_setzero_ps();
  }

  void add(const __m256i (&sums)[NX], __m256i sc16, float dw, const BlockQ8K* const (&x)[NX], int64_t i) {
    __m256i s[NX];
    for (int k = 0; k < NX; ++k) {  // the −32 offset per lane: 32·(sc_2l·bsum_2l + sc_2l+1·bsum_2l+1)
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][i].bsums));
      s[k] = _mm256_sub_epi32(sums[k], _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
    }
    if constexpr (kTiled) {
      vacc = tiled_step<false>(vacc, hsum_rows<NX>(s), _mm_setzero_si128(), dw, 0, dy_rows<NX>(x, i));
    } else {
      for (int k = 0; k < NX; ++k)
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[k][i].d), _mm256_cvtepi32_ps(s[k]), acc[k]);
    }
  }

  void store(float* out) const {
    if constexpr (kTiled) {
      store_rows<NX>(vacc, out);
    } else {
      for (int k = 0; k < NX; ++k) out[k] = hsum8(acc[k]);
    }
  }
};

// The float side of the Q2_K / Q3_K / IQ4_XS kernels (both ISA files), in the orders of
// dot_ref_kquants.cpp for NX rows: vec_dot's 8 lanes per row, or the tiled order (rows in the lanes
// of one register). add() gets the rows' scale-weighted lane sums and, for Q2_K, the rows'
// mins lanes (m_2l·bsum_2l + m_2l+1·bsum_2l+1).
template <bool kMins, bool kTiled, int NX>
struct KFloat {
  __m256 acc[NX];
  __m128 vacc = _mm_setzero_ps();
  KFloat() {
    for (int k = 0; k < NX; ++k) acc[k] = _mm256_setzero_ps();
  }
  void add(const __m256i (&sums)[NX], const __m256i (&mins)[NX], float dw, float dmw, const BlockQ8K* const (&x)[NX],
           int64_t i) {
    if constexpr (kTiled) {
      vacc = tiled_step<kMins>(vacc, hsum_rows<NX>(sums), kMins ? hsum_rows<NX>(mins) : _mm_setzero_si128(), dw, dmw,
                               dy_rows<NX>(x, i));
    } else {
      for (int k = 0; k < NX; ++k) {
        const float dy = x[k][i].d;
        if constexpr (kMins)
          acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(-dy * dmw), _mm256_cvtepi32_ps(mins[k]), acc[k]);
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dy * dw), _mm256_cvtepi32_ps(sums[k]), acc[k]);
      }
    }
  }
  void store(float* out) const {
    if constexpr (kTiled) {
      store_rows<NX>(vacc, out);
    } else {
      for (int k = 0; k < NX; ++k) out[k] = hsum8(acc[k]);
    }
  }
};

// Activation rows x_j = x + j·stride as a typed pointer array.
template <typename T, int NX>
inline void rows_of(const void* x, size_t stride, const T* (&out)[NX]) {
  for (int k = 0; k < NX; ++k)
    out[k] = reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + k * stride);
}

// Calls f(std::integral_constant<int, NX>{}) for nx in 1..kMaxNx (the several-rows kernels'
// dispatch to their run_nx<NX>).
template <typename F>
inline void with_nx(int nx, F&& f) {
  static_assert(detail::kMaxNx == 4);
  switch (nx) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

// Turns a kernel K (a struct with `template <int NX> static void run(n, w, x, stride, out)`) into
// a detail::DotFn that handles any nx in 1..kMaxNx.
template <typename K>
void by_nx(int64_t n, const void* w, const void* x, size_t stride, int nx, float* out) {
  static_assert(detail::kMaxNx == 4);
  switch (nx) {
    case 1: K::template run<1>(n, w, x, stride, out); return;
    case 2: K::template run<2>(n, w, x, stride, out); return;
    case 3: K::template run<3>(n, w, x, stride, out); return;
    default: K::template run<4>(n, w, x, stride, out); return;
  }
}

}  // namespace
}  // namespace ferry::cpu
