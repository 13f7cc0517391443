// IQ4_NL and IQ4_XS: ggml's quantize_row_iq4_nl_impl(…, ntry = 7, no importance weights), as
// quantize_iq4_nl / quantize_iq4_xs call it. Each 32-value block gets the scale d that maximizes
// (Σ w·q·x)² / Σ w·q² (w = x², q the nearest of the 16 non-linear levels to x/d) over 16 candidate
// scales; IQ4_XS then stores the block scales as 6-bit multiples of one fp16 super-block scale and
// picks the levels again with the stored scale.
//
// The AVX2 version runs 8 block searches in the 8 lanes (lane = block, like quantize_fast.cpp):
// every vector operation is the scalar operation of one block in the scalar order, so the bytes
// are the same. The nearest-level search is branch-free: for x strictly inside the level range,
// ggml's binary search ends at the bracket v[m−1] ≤ x < v[m] and returns m−1 if
// x − v[m−1] < v[m] − x, else m; that equals the number of k in [0, 15) for which
// !(x − v[k] < v[k+1] − x) (true for every k below the bracket, false above it), and the count is
// also 0 for x ≤ v[0] and 15 for x ≥ v[15], ggml's early returns.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/synth/quantize_extra.hpp"

#define FERRY_AVX2 __attribute__((target("avx2")))

namespace ferry::synth::iq4 {
namespace {

constexpr int kBlock = 32;
constexpr int kTries = 7;
constexpr float kGroupMaxEps = 1e-15f;
// ggml's kvalues_iq4nl and best_index_int8 over them (kernels/cpu/blocks.hpp).
constexpr const auto& kValues = cpu::kIq4nlValues;
int best_index(float x) { return cpu::iq4nl_nearest_level(x); }

int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The scale search of one block (0 for a block below the group threshold).
float block_scale(const float* x) {
  float weight[kBlock];
  for (int j = 0; j < kBlock; ++j) weight[j] = x[j] * x[j];
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  float d = -max / kValues[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < kBlock; ++j) {
    const float q = kValues[best_index(id * x[j])];
    const float w = weight[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    id = static_cast<float>(itry + kValues[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const float q = kValues[best_index(id * x[j])];
      const float w = weight[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Levels 0..15 of n values at inverse scale id, packed two per byte (value j low nibble, j + 16
// high, per 32).
void pack_levels(const uint8_t* L, int n, uint8_t* q4) {
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void finish_nl(const float* x, float scale, uint8_t* y) {
  put_u16(y, fp32_to_fp16(scale));
  const float id = scale ? 1 / scale : 0;
  uint8_t L[kBlock];
  for (int j = 0; j < kBlock; ++j) L[j] = static_cast<uint8_t>(best_index(id * x[j]));
  pack_levels(L, kBlock, y + 2);
}

// IQ4_XS super-block scale and 6-bit block scales from the 8 block scales; writes d, scales_h,
// scales_l and returns each block's stored scale d·l in dl.
void xs_scales(const float* scales, uint8_t* y, float* dl) {
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const float abs_d = std::fabs(scales[ib]);
    if (abs_d > amax_scale) {
      amax_scale = abs_d;
      max_scale = scales[ib];
    }
  }
  const float d = -max_scale / 32;
  put_u16(y, fp32_to_fp16(d));
  const float id = d ? 1 / d : 0.f;
  uint16_t scales_h = 0;
  uint8_t* scales_l = y + 4;
  for (int ib = 0; ib < 8; ++ib) {
    int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
    dl[ib] = d * l;
    l += 32;
    const uint8_t l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
    if (ib % 2 == 0) scales_l[ib / 2] = l_l;
    else scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
    scales_h |= static_cast<uint16_t>(l_h << 2 * (ib % 8));
  }
  put_u16(y + 2, scales_h);
}

}  // namespace

void quantize_nl_block(const float* x, uint8_t* y) { finish_nl(x, block_scale(x), y); }

void quantize_xs_block(const float* x, uint8_t* y) {
  float scales[8], dl[8];
  for (int ib = 0; ib < 8; ++ib) scales[ib] = block_scale(x + kBlock * ib);
  xs_scales(scales, y, dl);
  uint8_t L[256];
  for (int ib = 0; ib < 8; ++ib) {
    const float idl = dl[ib] ? 1 / dl[ib] : 0.f;
    for (int j = 0; j < kBlock; ++j) L[kBlock * ib + j] = static_cast<uint8_t>(best_index(idl * x[kBlock * ib + j]));
  }
  pack_levels(L, 256, y + 8);
}

namespace {

// Column j of 8 blocks of 32 values starting at x: lane b = x[32·b + j].
FERRY_AVX2 inline __m256 column(const float* x, int j) {
  const __m256i idx = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
  return _mm256_i32gather_ps(x + j, idx, 4);
}

// best_index per lane (as int32) by the count described at the top of the file.
FERRY_AVX2 inline __m256i best_index_v(__m256 x) {
  __m256i below = _mm256_set1_epi32(15);
  for (int k = 0; k < 15; ++k) {
    const __m256 lo = _mm256_sub_ps(x, _mm256_set1_ps(kValues[k]));
    const __m256 hi = _mm256_sub_ps(_mm256_set1_ps(kValues[k + 1]), x);
    // The mask is all ones (−1) where x is nearer v[k]: those k do not count.
    below = _mm256_add_epi32(below, _mm256_castps_si256(_mm256_cmp_ps(lo, hi, _CMP_LT_OQ)));
  }
  return below;
}

// kValues[l] per lane, as float.
FERRY_AVX2 inline __m256 level_value(__m256i l) {
  const __m256 lo = _mm256_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10);
  const __m256 hi = _mm256_setr_ps(1, 13, 25, 38, 53, 69, 89, 113);
  const __m256 from_hi = _mm256_castsi256_ps(_mm256_slli_epi32(l, 28));  // sign bit = bit 3 of l
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, l), _mm256_permutevar8x32_ps(hi, l), from_hi);
}

// Σ w·q·x and Σ w·q² at inverse scale id, per lane.
FERRY_AVX2 inline void sums(const __m256* xt, const __m256* wt, __m256 id, __m256& sumqx, __m256& sumq2) {
  sumqx = _mm256_setzero_ps();
  sumq2 = _mm256_setzero_ps();
  for (int j = 0; j < kBlock; ++j) {
    const __m256 q = level_value(best_index_v(_mm256_mul_ps(id, xt[j])));
    const __m256 wq = _mm256_mul_ps(wt[j], q);
    sumqx = _mm256_add_ps(sumqx, _mm256_mul_ps(wq, xt[j]));
    sumq2 = _mm256_add_ps(sumq2, _mm256_mul_ps(wq, q));
  }
}

// block_scale of the 8 blocks of 32 values at x, one per lane.
FERRY_AVX2 void block_scales_v(const float* x, __m256* xt, float* scales) {
  __m256 wt[kBlock];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps(), max = _mm256_setzero_ps();
  for (int j = 0; j < kBlock; ++j) {
    xt[j] = column(x, j);
    wt[j] = _mm256_mul_ps(xt[j], xt[j]);
    const __m256 ax = _mm256_and_ps(xt[j], abs_mask);
    const __m256 more = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
    amax = _mm256_blendv_ps(amax, ax, more);
    max = _mm256_blendv_ps(max, xt[j], more);
  }
  const __m256 zero = _mm256_setzero_ps();
  const __m256 flat = _mm256_cmp_ps(amax, _mm256_set1_ps(kGroupMaxEps), _CMP_LT_OQ);
  const __m256 neg_max = _mm256_xor_ps(max, _mm256_set1_ps(-0.0f));
  __m256 d = _mm256_div_ps(neg_max, _mm256_set1_ps(kValues[0]));
  __m256 sumqx, sumq2;
  sums(xt, wt, _mm256_div_ps(_mm256_set1_ps(1.0f), d), sumqx, sumq2);
  const __m256 q2_pos = _mm256_cmp_ps(sumq2, zero, _CMP_GT_OQ);
  d = _mm256_and_ps(_mm256_div_ps(sumqx, sumq2), q2_pos);
  __m256 best = _mm256_mul_ps(d, sumqx);
  for (int itry = -kTries; itry <= kTries; ++itry) {
    const __m256 id = _mm256_div_ps(_mm256_set1_ps(static_cast<float>(itry + kValues[0])), max);
    sums(xt, wt, id, sumqx, sumq2);
    const __m256 better = _mm256_and_ps(
        _mm256_cmp_ps(sumq2, zero, _CMP_GT_OQ),
        _mm256_cmp_ps(_mm256_mul_ps(sumqx, sumqx), _mm256_mul_ps(best, sumq2), _CMP_GT_OQ));
    const __m256 this_d = _mm256_div_ps(sumqx, sumq2);
    d = _mm256_blendv_ps(d, this_d, better);
    best = _mm256_blendv_ps(best, _mm256_mul_ps(this_d, sumqx), better);
  }
  _mm256_storeu_ps(scales, _mm256_andnot_ps(flat, d));
}

// Levels of the 8 blocks at inverse scales idl (one per lane), packed as ggml stores them: block b's
// 16 bytes at q4 + 16·b (IQ4_XS) or at q4 + stride·b (IQ4_NL, stride = the block size).
FERRY_AVX2 void store_levels(const __m256* xt, __m256 idl, uint8_t* q4, int stride) {
  alignas(32) int32_t lo[8], hi[8];
  for (int j = 0; j < 16; ++j) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lo), best_index_v(_mm256_mul_ps(idl, xt[j])));
    _mm256_store_si256(reinterpret_cast<__m256i*>(hi), best_index_v(_mm256_mul_ps(idl, xt[j + 16])));
    for (int b = 0; b < 8; ++b) q4[stride * b + j] = static_cast<uint8_t>(lo[b] | (hi[b] << 4));
  }
}

// 1/s where s != 0, else 0, per lane.
FERRY_AVX2 inline __m256 inverse_or_zero(const float* s) {
  const __m256 v = _mm256_loadu_ps(s);
  const __m256 nonzero = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_OQ);
  return _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), v), nonzero);
}

}  // namespace

FERRY_AVX2 void quantize_nl_8_blocks_avx2(const float* x, uint8_t* y) {
  __m256 xt[kBlock];
  float scales[8];
  block_scales_v(x, xt, scales);
  for (int b = 0; b < 8; ++b) put_u16(y + kNlBytes * b, fp32_to_fp16(scales[b]));
  store_levels(xt, inverse_or_zero(scales), y + 2, kNlBytes);
}

FERRY_AVX2 void quantize_xs_block_avx2(const float* x, uint8_t* y) {
  __m256 xt[kBlock];
  float scales[8], dl[8];
  block_scales_v(x, xt, scales);
  xs_scales(scales, y, dl);
  store_levels(xt, inverse_or_zero(dl), y + 8, 16);
}

}  // namespace ferry::synth::iq4
