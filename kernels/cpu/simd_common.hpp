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

// Σ of the int32 lanes (exact).
inline int32_t hsum_i32(__m128i v) {
  v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
  return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1))));
}
inline int32_t hsum_i32(__m256i v) {
  return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

// Integer mins term of Q4_K/Q5_K for one activation block: Σ_j m_j · (sum of the 32 activations
// of sub-block j), from the 16-value group sums (|sum of 32| ≤ 32·127 fits int16). mins16: 8 × s16.
inline int32_t q4k_mins_int(__m128i mins16, const int16_t* bsums) {
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
  const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
  return hsum_i32(_mm_madd_epi16(mins16, q8s));
}

// The per-chunk mins terms of Q4_K for one activation block: lane c = m_2c·(sum of sub-block 2c)
// + m_2c+1·(sum of sub-block 2c+1), as ggml's 4-row kernel forms them.
inline __m128i q4k_mins_chunks(__m128i mins16, const int16_t* bsums) {
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
  const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
  return _mm_madd_epi16(mins16, q8s);
}

// The four chunk sums of one Q4_K block in one register: lane c = Σ of the int32 lanes of p[c].
inline __m128i hsum_i32_x4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// acc ← fma(v[c], d, acc) for c = 0..3 in turn (lane 0 of acc; the rounding order of ggml's
// 4-row Q4_K kernel).
inline __m128 fma_chain4(__m128 v, __m128 d, __m128 acc) {
  acc = _mm_fmadd_ss(v, d, acc);
  acc = _mm_fmadd_ss(_mm_movehdup_ps(v), d, acc);
  acc = _mm_fmadd_ss(_mm_movehl_ps(v, v), d, acc);
  return _mm_fmadd_ss(_mm_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 3, 3)), d, acc);
}

// The float steps shared by the SIMD Q4_K/Q5_K kernels, in the order dot_ref.cpp documents
// (scalar FMAs: the accumulation order is what keeps results bit-identical to llama.cpp's).
struct Q4KAcc {  // Q4_K: integer sums of a block (or chunk), one FMA each for scale and mins terms
  float acc = 0, acc_min = 0;
  void add(int32_t sum, int32_t mins, float d, float dmin) {  // d = d_w·d_y, dmin = dmin_w·d_y
    acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(sum)), _mm_set_ss(d), _mm_set_ss(acc)));
    acc_min = _mm_cvtss_f32(
        _mm_fmadd_ss(_mm_set_ss(static_cast<float>(mins)), _mm_set_ss(dmin), _mm_set_ss(acc_min)));
  }
  // The four 64-value chunks of a block (ggml's 4-row kernel): sums and mins as 4 int32 lanes.
  void add4(__m128i sums, __m128i mins, float d, float dmin) {
    acc = _mm_cvtss_f32(fma_chain4(_mm_cvtepi32_ps(sums), _mm_set_ss(d), _mm_set_ss(acc)));
    acc_min = _mm_cvtss_f32(fma_chain4(_mm_cvtepi32_ps(mins), _mm_set_ss(dmin), _mm_set_ss(acc_min)));
  }
  void add_f(float sum, float mins, float d, float dmin) {
    acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(sum), _mm_set_ss(d), _mm_set_ss(acc)));
    acc_min = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(mins), _mm_set_ss(dmin), _mm_set_ss(acc_min)));
  }
  float result() const { return acc - acc_min; }
};

// Q4_K in the 1-row order with the per-block horizontal sums done four blocks at a time (one
// reduction tree instead of four); the FMAs still run block by block, in order.
struct Q4KRowAcc {
  Q4KAcc acc;
  __m256i s[4];  // per pending block: the 8 int32 lanes of Σ sc·q·y
  __m128i m[4];  // per pending block: 4 int32 lanes of the mins term
  float d[4], dmin[4];
  int u = 0;
  void push(__m256i sumi, __m128i mins4, float dd, float ddmin) {
    s[u] = sumi;
    m[u] = mins4;
    d[u] = dd;
    dmin[u] = ddmin;
    if (++u == 4) flush();
  }
  void flush() {
    if (u == 0) return;
    for (int c = u; c < 4; ++c) {
      s[c] = _mm256_setzero_si256();
      m[c] = _mm_setzero_si128();
    }
    alignas(16) float fs[4], fm[4];
    _mm_store_ps(fs, _mm_cvtepi32_ps(hsum_i32_x4(s[0], s[1], s[2], s[3])));
    _mm_store_ps(fm, _mm_cvtepi32_ps(_mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]))));
    for (int c = 0; c < u; ++c) acc.add_f(fs[c], fm[c], d[c], dmin[c]);
    u = 0;
  }
  float result() {
    flush();
    return acc.result();
  }
};
// ggml's tiled kernel (Q5_K/Q6_K products of 8+ rows), one block: r = d_w·s, then r − dmin_w·m
// fused when the type has mins, then fma(r, d_y, acc).
template <bool kHasMin>
inline float tiled_add(float acc, int32_t s, int32_t m, float dw, float dmw, float dy) {
  __m128 r = _mm_mul_ss(_mm_set_ss(dw), _mm_set_ss(static_cast<float>(s)));
  if constexpr (kHasMin) r = _mm_fnmadd_ss(_mm_set_ss(dmw), _mm_set_ss(static_cast<float>(m)), r);
  return _mm_cvtss_f32(_mm_fmadd_ss(r, _mm_set_ss(dy), _mm_set_ss(acc)));
}

// Q5_K: the mins term as ggml's kernel adds it, fma(−d_y·dmin_w, mins, sum).
inline float q5k_add_mins(float sum, int32_t mins, float dmw, float dy) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(-dy * dmw), _mm_set_ss(static_cast<float>(mins)), _mm_set_ss(sum)));
}

// Activation rows x_j = x + j·stride as a typed pointer array.
template <typename T, int NX>
inline void rows_of(const void* x, size_t stride, const T* (&out)[NX]) {
  for (int k = 0; k < NX; ++k)
    out[k] = reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + k * stride);
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
