// Lane-parallel K-quant quantizers, bit-identical to cpu::quantize_row_ref (see the header).
// Layouts are ggml's block_q4_K / block_q5_K / block_q6_K, written byte by byte here because
// kernels/cpu/blocks.hpp is private to the kernels. Every vector operation below corresponds to one
// scalar operation of ggml's make_qkx2_quants / make_qx_quants in the same order; blends replace
// the scalar ifs. The functions carry target("avx2") (without fma: a fused multiply-add would round
// differently) and are only called after a run-time check.
#include "runtime/synth/quantize_fast.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/core/fp16.hpp"

#define FERRY_AVX2 __attribute__((target("avx2")))

namespace ferry::synth {
namespace {

constexpr int kQK = 256;
constexpr float kGroupMaxEps = 1e-15f;

// Q4_K: d(2) dmin(2) scales(12) qs(128); Q5_K: d dmin scales qh(32) qs(128);
// Q6_K: ql(128) qh(64) scales(16) d(2).
constexpr size_t kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210;

int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

FERRY_AVX2 inline __m256i nearest_int_v(__m256 x) {
  const __m256i i = _mm256_castps_si256(_mm256_add_ps(x, _mm256_set1_ps(12582912.f)));
  return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}
FERRY_AVX2 inline __m256i clamp_v(__m256i l, int lo, int hi) {
  return _mm256_max_epi32(_mm256_set1_epi32(lo), _mm256_min_epi32(_mm256_set1_epi32(hi), l));
}
// mask ? b : a
FERRY_AVX2 inline __m256 select(__m256 a, __m256 b, __m256 mask) { return _mm256_blendv_ps(a, b, mask); }
FERRY_AVX2 inline __m256i select_i(__m256i a, __m256i b, __m256 mask) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), mask));
}

// Column l of 8 sub-blocks of `stride` values starting at x: lane j = x[stride·j + l].
FERRY_AVX2 inline __m256 column(const float* x, int stride, int l) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
  return _mm256_i32gather_ps(x + l, idx, 4);
}

// ggml's make_qkx2_quants(32, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep, false) for
// the 8 sub-blocks of one super-block at once. xt/wt: 32 columns (lane = sub-block).
FERRY_AVX2 void qkx2_search(const __m256* xt, const __m256* wt, int nmax, float rmin, float rdelta, int nstep,
                            float* scale_out, float* the_min_out, uint8_t* L /* 8 × 32 */) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 min = xt[0], max = xt[0];
  __m256 sum_w = wt[0];
  __m256 sum_x = _mm256_mul_ps(sum_w, xt[0]);
  for (int i = 1; i < 32; ++i) {
    min = select(min, xt[i], _mm256_cmp_ps(xt[i], min, _CMP_LT_OQ));
    max = select(max, xt[i], _mm256_cmp_ps(xt[i], max, _CMP_GT_OQ));
    sum_w = _mm256_add_ps(sum_w, wt[i]);
    sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(wt[i], xt[i]));
  }
  min = select(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));
  const __m256 flat = _mm256_cmp_ps(max, min, _CMP_EQ_OQ);  // the scalar code returns early
  __m256 iscale = _mm256_div_ps(_mm256_set1_ps(static_cast<float>(nmax)), _mm256_sub_ps(max, min));
  __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
  __m256 best_error = zero;
  __m256i Lbest[32], Laux[32];
  for (int i = 0; i < 32; ++i) {
    Lbest[i] = clamp_v(nearest_int_v(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
    __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lbest[i])), min), xt[i]);
    diff = _mm256_mul_ps(diff, diff);
    best_error = _mm256_add_ps(best_error, _mm256_mul_ps(wt[i], diff));
  }
  for (int is = 0; nstep >= 1 && is <= nstep; ++is) {
    // ggml divides by max - min with the min of the best fit so far (min is updated below).
    iscale = _mm256_div_ps(_mm256_set1_ps(rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)),
                           _mm256_sub_ps(max, min));
    __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    for (int i = 0; i < 32; ++i) {
      Laux[i] = clamp_v(nearest_int_v(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
      const __m256 l = _mm256_cvtepi32_ps(Laux[i]);
      const __m256 wl = _mm256_mul_ps(wt[i], l);
      sum_l = _mm256_add_ps(sum_l, wl);
      sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
      sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xt[i]));
    }
    const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
    const __m256 d_pos = _mm256_andnot_ps(flat, _mm256_cmp_ps(D, zero, _CMP_GT_OQ));
    if (_mm256_movemask_ps(d_pos) == 0) continue;
    __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
    __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
    const __m256 min_pos = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
    this_min = select(this_min, zero, min_pos);
    this_scale = select(this_scale, _mm256_div_ps(sum_xl, sum_l2), min_pos);
    __m256 cur_error = zero;
    for (int i = 0; i < 32; ++i) {
      __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(Laux[i])), this_min), xt[i]);
      diff = _mm256_mul_ps(diff, diff);
      cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(wt[i], diff));
    }
    const __m256 better = _mm256_and_ps(d_pos, _mm256_cmp_ps(cur_error, best_error, _CMP_LT_OQ));
    if (_mm256_movemask_ps(better) == 0) continue;
    for (int i = 0; i < 32; ++i) Lbest[i] = select_i(Lbest[i], Laux[i], better);
    best_error = select(best_error, cur_error, better);
    scale = select(scale, this_scale, better);
    min = select(min, this_min, better);
  }
  scale = select(scale, zero, flat);
  const __m256 the_min = _mm256_xor_ps(min, _mm256_set1_ps(-0.0f));  // -min
  _mm256_storeu_ps(scale_out, scale);
  _mm256_storeu_ps(the_min_out, the_min);
  alignas(32) int32_t lanes[8];
  const int flat_mask = _mm256_movemask_ps(flat);
  for (int i = 0; i < 32; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), Lbest[i]);
    for (int j = 0; j < 8; ++j) L[32 * j + i] = (flat_mask >> j) & 1 ? 0 : static_cast<uint8_t>(lanes[j]);
  }
}

// Q4_K (nmax 15, rmin -1, 20 steps) and Q5_K (nmax 31, rmin -0.5, 15 steps) levels of one
// super-block: the searches in lanes, then ggml's scalar scale quantization and requantization.
FERRY_AVX2 void k4_levels(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* block,
                          uint8_t* L) {
  __m256 xt[32], wt[32];
  __m256 sum_x2 = _mm256_setzero_ps();
  for (int l = 0; l < 32; ++l) {
    xt[l] = column(x, 32, l);
    sum_x2 = _mm256_add_ps(sum_x2, _mm256_mul_ps(xt[l], xt[l]));
  }
  const __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32.0f)));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int l = 0; l < 32; ++l) wt[l] = _mm256_add_ps(av_x, _mm256_and_ps(xt[l], abs_mask));
  float scales[8], mins[8];
  qkx2_search(xt, wt, nmax, rmin, rdelta, nstep, scales, mins, L);

  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* sc = block + 4;
  std::memset(sc, 0, 12);
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      sc[j] = ls[j];
      sc[j + 4] = lm[j];
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      sc[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      sc[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
  const uint16_t d = fp32_to_fp16(max_scale / 63.f), dmin = fp32_to_fp16(max_min / 63.f);
  put_u16(block, d);
  put_u16(block + 2, dmin);
  for (int j = 0; j < 8; ++j) {
    const float dj = fp16_to_fp32(d) * ls[j];
    if (!dj) continue;
    const float dm = fp16_to_fp32(dmin) * lm[j];
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / dj);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

FERRY_AVX2 void quantize_q4_k_block(const float* x, uint8_t* y) {
  uint8_t L[kQK];
  k4_levels(x, 15, -1.f, 0.1f, 20, y, L);
  uint8_t* q = y + 16;
  for (int j = 0; j < kQK; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

FERRY_AVX2 void quantize_q5_k_block(const float* x, uint8_t* y) {
  uint8_t L[kQK];
  k4_levels(x, 31, -0.5f, 0.1f, 15, y, L);
  uint8_t* qh = y + 16;
  uint8_t* ql = y + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
  }
}

// ggml's make_qx_quants(16, 32, x, L, rmse_type 1, NULL) for 8 sub-blocks of 16 values.
FERRY_AVX2 void qx_search(const float* x, float* scale_out, int8_t* L /* 8 × 16 */) {
  constexpr int nmax = 32;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 xt[16];
  __m256 max = zero, amax = zero;
  for (int i = 0; i < 16; ++i) {
    xt[i] = column(x, 16, i);
    const __m256 ax = _mm256_and_ps(xt[i], abs_mask);
    const __m256 bigger = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
    amax = select(amax, ax, bigger);
    max = select(max, xt[i], bigger);
  }
  const __m256 tiny = _mm256_cmp_ps(amax, _mm256_set1_ps(kGroupMaxEps), _CMP_LT_OQ);
  __m256 iscale = _mm256_div_ps(_mm256_set1_ps(static_cast<float>(-nmax)), max);
  __m256 sumlx = zero, suml2 = zero;
  __m256i Lbest[16], Lcur[16];
  for (int i = 0; i < 16; ++i) {
    const __m256i l = clamp_v(nearest_int_v(_mm256_mul_ps(iscale, xt[i])), -nmax, nmax - 1);
    Lbest[i] = _mm256_add_epi32(l, _mm256_set1_epi32(nmax));
    const __m256 lf = _mm256_cvtepi32_ps(l);
    const __m256 w = _mm256_mul_ps(xt[i], xt[i]);
    sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, xt[i]), lf));
    suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
  }
  __m256 scale = select(zero, _mm256_div_ps(sumlx, suml2), _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ));
  __m256 best = _mm256_mul_ps(scale, sumlx);
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = _mm256_div_ps(_mm256_set1_ps(-(static_cast<float>(nmax) + 0.1f * static_cast<float>(is))), max);
    sumlx = suml2 = zero;
    for (int i = 0; i < 16; ++i) {
      const __m256i l = clamp_v(nearest_int_v(_mm256_mul_ps(iscale, xt[i])), -nmax, nmax - 1);
      Lcur[i] = l;
      const __m256 lf = _mm256_cvtepi32_ps(l);
      const __m256 w = _mm256_mul_ps(xt[i], xt[i]);
      sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, xt[i]), lf));
      suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
    }
    const __m256 better = _mm256_andnot_ps(
        tiny, _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
                            _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ)));
    if (_mm256_movemask_ps(better) == 0) continue;
    for (int i = 0; i < 16; ++i) Lbest[i] = select_i(Lbest[i], _mm256_add_epi32(Lcur[i], _mm256_set1_epi32(nmax)), better);
    const __m256 new_scale = _mm256_div_ps(sumlx, suml2);
    scale = select(scale, new_scale, better);
    best = select(best, _mm256_mul_ps(new_scale, sumlx), better);
  }
  scale = select(scale, zero, tiny);
  _mm256_storeu_ps(scale_out, scale);
  alignas(32) int32_t lanes[8];
  const int tiny_mask = _mm256_movemask_ps(tiny);
  for (int i = 0; i < 16; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), Lbest[i]);
    for (int j = 0; j < 8; ++j) L[16 * j + i] = (tiny_mask >> j) & 1 ? 0 : static_cast<int8_t>(lanes[j]);
  }
}

FERRY_AVX2 void quantize_q6_k_block(const float* x, uint8_t* y) {
  int8_t L[kQK];
  float scales[16];
  qx_search(x, scales, L);
  qx_search(x + 128, scales + 8, L + 128);
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float abs_scale = std::fabs(scales[ib]);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, kQ6KBytes);
    return;
  }
  const float iscale = -128.f / max_scale;
  const uint16_t d = fp32_to_fp16(1 / iscale);
  put_u16(y + 208, d);
  auto* sc = reinterpret_cast<int8_t*>(y + 192);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float dj = fp16_to_fp32(d) * sc[j];
    if (!dj) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / dj);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
  }
}

bool have_avx2() { return cpu::active_isa() >= cpu::Isa::avx2; }

}  // namespace

bool quantize_rows_is_fast(GgmlType t) {
  return have_avx2() && (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K);
}

void quantize_rows(GgmlType t, const float* src, void* dst, int64_t n_rows, int64_t row_len) {
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(row_len));
  auto* out = static_cast<uint8_t*>(dst);
  if (!quantize_rows_is_fast(t)) {
    for (int64_t r = 0; r < n_rows; ++r) cpu::quantize_row_ref(t, src + r * row_len, out + r * rb, row_len);
    return;
  }
  const int64_t n_blocks = n_rows * row_len / kQK;  // rows are whole blocks (row_bytes checked)
  void (*block_fn)(const float*, uint8_t*) = t == GgmlType::Q4_K   ? quantize_q4_k_block
                                             : t == GgmlType::Q5_K ? quantize_q5_k_block
                                                                   : quantize_q6_k_block;
  const size_t block_bytes = t == GgmlType::Q4_K ? kQ4KBytes : t == GgmlType::Q5_K ? kQ5KBytes : kQ6KBytes;
  for (int64_t b = 0; b < n_blocks; ++b) block_fn(src + b * kQK, out + b * block_bytes);
}

}  // namespace ferry::synth
