#pragma once
// AVX-512 matvec kernels of Q4_0, IQ4_NL and MXFP4 in the repacked order (ggml's 8x8 gemv: per
// weight row one scalar chain, acc = fma(Σ w·x, d_w·d_x, acc) per block), sixteen weight rows at a
// time (detail::DotRowsFn), with up to kMaxNx activation rows, on the file's layout
// (RepackedRows512) and on the sixteen-row interleaved layout (Rows16x512; rows16.hpp). Included by
// dot_avx512_impl.hpp.
//
// Why sixteen rows: the order's float step is one FMA per 32-value block and row, on a chain, after
// a full integer sum of the block; row by row (dot_legacy_avx2.cpp) that costs a horizontal sum,
// two scale conversions and a dependent FMA per 18 bytes of weights, which is what held Q4_0 and
// MXFP4 decode below llama.cpp's (whose repacked weights put 8 rows in the lanes of one register).
// Here lane r of every register belongs to row r, so a block costs one FMA for all sixteen rows.
// The weights stay as they are in the file: the 16 bytes of nibbles of each row's block are loaded
// into 4 registers and transposed as 32-bit words, so register j holds nibble bytes 4j..4j+3 of
// every row (values 4j..4j+3 in the low nibbles, 16+4j..16+4j+3 in the high ones), and one
// vpdpbusd with the matching 4 activation bytes broadcast adds those products into each row's lane.
//
// vpdpbusd multiplies unsigned by signed bytes: the levels are taken as u = level + kOffset ≥ 0
// (Q4_0: the nibble itself, offset 8; the table formats: the table plus kOffset) and kOffset·Σx is
// subtracted once per block. All of that is integer, exact in any order; the float step per row is
// the reference's. Without VNNI, maddubs + madd stand in for vpdpbusd, which is exact only while a
// pair of products fits int16 (2·kMaxU·128 ≤ 32767): Q4_0 and MXFP4, not IQ4_NL.
#include <cstddef>

namespace ferry::cpu {
namespace {

// 16 dwords that start at the rows' blocks → the 16 scales (an F16 d in the low 16 bits).
struct F16ScaleRows {
  static __m512 scales(__m512i words) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)); }
  // The 16 scales stored side by side (the interleaved layout).
  static __m512 scales16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct Q4_0Rows : F16ScaleRows {
  using Block = BlockQ4_0;
  static constexpr size_t kQsOffset = offsetof(BlockQ4_0, qs);
  static constexpr int kOffset = 8;
  static constexpr int kMaxU = 15;
  static constexpr bool kTable = false;
  static constexpr const int8_t* kValues = nullptr;
};
struct IQ4NLRows : F16ScaleRows {
  using Block = BlockIQ4NL;
  static constexpr size_t kQsOffset = offsetof(BlockIQ4NL, qs);
  static constexpr int kOffset = 128;
  static constexpr int kMaxU = 113 + 128;
  static constexpr bool kTable = true;
  static constexpr const int8_t* kValues = kIq4nlValues;
};
struct MXFP4Rows {
  using Block = BlockMXFP4;
  static constexpr size_t kQsOffset = offsetof(BlockMXFP4, qs);
  static constexpr int kOffset = 12;
  static constexpr int kMaxU = 24;
  static constexpr bool kTable = true;
  static constexpr const int8_t* kValues = kMxfp4Values;
  // e8m0_to_fp32_half lane-wise: e < 2 → 0x00200000 << e, else (e − 1) << 23.
  static __m512 scales(__m512i words) {
    const __m512i e = _mm512_and_si512(words, _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, tiny));
  }
  static __m512 scales16(const uint8_t* p) {
    return scales(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};

template <typename W>
constexpr bool kRowsExactWithoutVnni = 2 * W::kMaxU * 128 <= 32767;

// acc + Σ of the 4 u8·s8 products in each 32-bit lane.
template <bool kVnni>
inline __m512i dot4_u8s8(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni) return _mm512_dpbusd_epi32(acc, u, s);
  else return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}

// Σ of the 32 signed bytes of an activation block.
inline int32_t sum_i8x32(const int8_t* qs) {
  const __m256i x = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)),
                                     _mm256_set1_epi8(static_cast<char>(0x80)));  // x + 128, as u8
  const __m256i s4 = _mm256_sad_epu8(x, _mm256_setzero_si256());               // 4 × Σ of 8
  __m128i s = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
  s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
  return _mm_cvtsi128_si32(s) - 32 * 128;
}

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One block step of sixteen rows: t[j] holds nibble bytes 4j..4j+3 of every row (lane r = row r),
// dw the rows' scales; adds the block's products into acc[k] for the NX activation rows.
template <bool kVnni, typename W, int NX>
inline void rows_block(const __m512i t[4], __m512 dw, __m512i table, const BlockQ8_0* const* x, int64_t i,
                       __m512 acc[NX]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i lo[4], hi[4];
  for (int j = 0; j < 4; ++j) {
    lo[j] = _mm512_and_si512(t[j], m4);
    hi[j] = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), m4);
    if constexpr (W::kTable) {
      lo[j] = _mm512_shuffle_epi8(table, lo[j]);
      hi[j] = _mm512_shuffle_epi8(table, hi[j]);
    }
  }
  for (int k = 0; k < NX; ++k) {
    const int8_t* xq = x[k][i].qs;
    // Two integer chains (low and high nibbles), added at the end: half the dependent vpdpbusd
    // latency per block; integer sums are exact in any order.
    __m512i sum_lo = _mm512_set1_epi32(-W::kOffset * sum_i8x32(xq)), sum_hi = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      sum_lo = dot4_u8s8<kVnni>(sum_lo, lo[j], _mm512_set1_epi32(load_i32(xq + 4 * j)));
      sum_hi = dot4_u8s8<kVnni>(sum_hi, hi[j], _mm512_set1_epi32(load_i32(xq + 16 + 4 * j)));
    }
    const __m512i sum = _mm512_add_epi32(sum_lo, sum_hi);
    acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(h2f(x[k][i].d))), acc[k]);
  }
}

// The table formats' levels as unsigned bytes (level + kOffset) in every 128-bit lane.
template <typename W>
inline __m512i level_table() {
  if constexpr (!W::kTable) return _mm512_setzero_si512();
  alignas(16) uint8_t u[16];
  for (int q = 0; q < 16; ++q) u[q] = static_cast<uint8_t>(W::kValues[q] + W::kOffset);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(u)));
}

template <int NX>
inline void store_rows(const __m512 acc[NX], int nw, float* out, size_t out_stride) {
  for (int k = 0; k < NX; ++k) {
    alignas(64) float res[detail::kMaxRows];
    _mm512_store_ps(res, acc[k]);
    for (int r = 0; r < nw; ++r) out[k * out_stride + r] = res[r];
  }
}

template <bool kVnni, typename W>
struct RepackedRows512 {
  static_assert(kVnni || kRowsExactWithoutVnni<W>);
  using Block = typename W::Block;

  // kFull (nw = 16): row 4q + g is at g·stride + q·4·stride, addressed from 4 pointers and 3
  // strides instead of 16 pointers, which would not fit the general registers next to the loop's.
  template <int NX, bool kFull>
  static void run_nx(int64_t n, const void* wv, size_t w_stride, int nw, const void* xv, size_t x_stride,
                     float* out, size_t out_stride) {
    const auto* w = static_cast<const uint8_t*>(wv);
    const BlockQ8_0* x[NX];
    rows_of(xv, x_stride, x);
    // Rows past nw repeat row 0 (their lanes are computed and dropped). Register g of the load
    // holds rows g, 4+g, 8+g, 12+g in its 128-bit quarters, so that after the transpose lane r is
    // row r.
    const uint8_t* row[kRows];
    alignas(64) int32_t offs[kRows];
    for (int r = 0; r < kRows; ++r) {
      const size_t o = r < nw ? static_cast<size_t>(r) * w_stride : 0;
      row[r] = w + o;
      offs[r] = static_cast<int32_t>(o);
    }
    const __m512i gather_offs = _mm512_load_si512(offs);
    const size_t s4 = 4 * w_stride;
    const uint8_t* next = w + kRows * w_stride;  // the next sixteen rows (see the prefetch below)
    const __m512i table = level_table<W>();
    __m512 acc[NX];
    for (int k = 0; k < NX; ++k) acc[k] = _mm512_setzero_ps();
    const int64_t nb = n / kQK8_0;
    for (int64_t i = 0; i < nb; ++i) {
      const size_t blk = static_cast<size_t>(i) * sizeof(Block);
      auto at = [&](int r) {
        if constexpr (kFull) return w + blk + static_cast<size_t>(r % 4) * w_stride + static_cast<size_t>(r / 4) * s4;
        else return row[r] + blk;
      };
      // Prefetch: not a fixed distance ahead in each of the sixteen rows (the rows of an expert
      // matrix are ~1 KiB, so that lands in rows already being read and leaves the sixteen streams
      // to the hardware; bench/results/2026-12-04-cpu-decode-profile-zen4.md), but the next sixteen
      // rows, which follow these in memory, as one linear stream: 16 blocks (4.5 cache lines) per
      // block step, so the whole next group is in cache when the caller gets to it.
      for (int l = 0; l < 5; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(next + i * kRows * sizeof(Block)) + 64 * l, _MM_HINT_T0);
      __m512i a[4];
      for (int g = 0; g < 4; ++g) {
        auto ld = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at(r) + W::kQsOffset)); };
        a[g] = _mm512_inserti32x4(
            _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(ld(g)), ld(4 + g), 1), ld(8 + g), 2),
            ld(12 + g), 3);
      }
      const __m512i lo01 = _mm512_unpacklo_epi32(a[0], a[1]), hi01 = _mm512_unpackhi_epi32(a[0], a[1]);
      const __m512i lo23 = _mm512_unpacklo_epi32(a[2], a[3]), hi23 = _mm512_unpackhi_epi32(a[2], a[3]);
      const __m512i t[4] = {_mm512_unpacklo_epi64(lo01, lo23), _mm512_unpackhi_epi64(lo01, lo23),
                            _mm512_unpacklo_epi64(hi01, hi23), _mm512_unpackhi_epi64(hi01, hi23)};
      rows_block<kVnni, W, NX>(t, W::scales(_mm512_i32gather_epi32(gather_offs, w + blk, 1)), table, x, i, acc);
    }
    store_rows<NX>(acc, nw, out, out_stride);
  }

  static void run(int64_t n, const void* w, size_t w_stride, int nw, const void* x, size_t x_stride, int nx,
                  float* out, size_t out_stride) {
    with_nx(nx, [&](auto k) {
      if (nw == kRows) run_nx<k(), true>(n, w, w_stride, nw, x, x_stride, out, out_stride);
      else run_nx<k(), false>(n, w, w_stride, nw, x, x_stride, out, out_stride);
    });
  }

 private:
  static constexpr int kRows = detail::kMaxRows;
  static_assert(kRows == 16, "one 512-bit register of rows");
};

// The same products on the sixteen-row interleaved layout (rows16.hpp): per block of a group the
// sixteen scales, then the four registers t[j] as they are, so a block step is five loads instead of
// sixteen loads, the transpose and a gather. Whole groups only (nw = 16); w is the group's start.
template <bool kVnni, typename W>
struct Rows16x512 {
  static_assert(kVnni || kRowsExactWithoutVnni<W>);
  static constexpr size_t kChunk = detail::kMaxRows * sizeof(typename W::Block);
  static constexpr size_t kScales = detail::kMaxRows * W::kQsOffset;
  // Prefetch distance in chunks (~2.3 KiB): the group is one linear stream.
  static constexpr int64_t kAhead = 8;

  template <int NX>
  static void run_nx(int64_t n, const uint8_t* w, const void* xv, size_t x_stride, float* out,
                     size_t out_stride) {
    const BlockQ8_0* x[NX];
    rows_of(xv, x_stride, x);
    const __m512i table = level_table<W>();
    __m512 acc[NX];
    for (int k = 0; k < NX; ++k) acc[k] = _mm512_setzero_ps();
    const int64_t nb = n / kQK8_0;
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* c = w + static_cast<size_t>(i) * kChunk;
      for (int l = 0; l < 5; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(c + kAhead * kChunk) + 64 * l, _MM_HINT_T0);
      const __m512i t[4] = {_mm512_loadu_si512(c + kScales), _mm512_loadu_si512(c + kScales + 64),
                            _mm512_loadu_si512(c + kScales + 128), _mm512_loadu_si512(c + kScales + 192)};
      rows_block<kVnni, W, NX>(t, W::scales16(c), table, x, i, acc);
    }
    store_rows<NX>(acc, detail::kMaxRows, out, out_stride);
  }

  static void run(int64_t n, const void* w, size_t /*w_stride*/, int /*nw*/, const void* x, size_t x_stride, int nx,
                  float* out, size_t out_stride) {
    const auto* g = static_cast<const uint8_t*>(w);
    with_nx(nx, [&](auto k) { run_nx<k()>(n, g, x, x_stride, out, out_stride); });
  }
};

template <bool kVnni>
void add_repacked_rows512(detail::DotKernels& t) {
  t.q4_0_repacked_rows = RepackedRows512<kVnni, Q4_0Rows>::run;
  t.mxfp4_repacked_rows = RepackedRows512<kVnni, MXFP4Rows>::run;
  t.q4_0_rows16 = Rows16x512<kVnni, Q4_0Rows>::run;
  t.mxfp4_rows16 = Rows16x512<kVnni, MXFP4Rows>::run;
  if constexpr (kVnni) {
    t.iq4_nl_repacked_rows = RepackedRows512<kVnni, IQ4NLRows>::run;
    t.iq4_nl_rows16 = Rows16x512<kVnni, IQ4NLRows>::run;
  }
}

}  // namespace
}  // namespace ferry::cpu
