// Reference quantizers: the algorithms of ggml's quantize_row_*_ref (no importance matrix), with
// the same float operations in the same order, so that files Ferry writes (synth) quantize like
// llama-quantize does without an imatrix and errors are comparable.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_check.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest via the 1.5·2^23 trick (ggml's nearest_int; valid for |x| ≤ 2^22).
inline int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Symmetric scale search (ggml's make_qx_quants with rmse_type 1 and no importance weights):
// L[i] in [0, 2·nmax) such that x ≈ scale·(L − nmax), trying 19 scales around −nmax/max and
// keeping the one with the best weighted (w = x²) least-squares fit.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Asymmetric scale+min search (ggml's make_qkx2_quants): x ≈ scale·L − the_min, L in [0, nmax],
// trying nstep+1 scales (rmin + rdelta·is + nmax)/(max − min) and solving the weighted
// least-squares fit for scale and min at each.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[i * kQK8_0 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::round(x[i * kQK8_0 + j] * id));
  }
}

// Packs 6-bit scale ls and min lm of sub-block j into the 12-byte Q4_K/Q5_K scales field.
void pack_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
  if (j < 4) {
    scales[j] = ls;
    scales[j + 4] = lm;
  } else {
    scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per sub-block scale/min search, 6-bit
// quantization of the scales and mins against the block maxima, then requantization of the
// values with the rounded scales. L receives the 256 levels.
void quantize_k4_levels(const float* x, int nmax, float rmin, float rdelta, int nstep,
                        uint16_t& d_out, uint16_t& dmin_out, uint8_t* scales_out, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales_out, 0, 12);
  for (int j = 0; j < kQK_K / 32; ++j) {
    // uint8 truncation before the clamp, as ggml does
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    pack_scale_min_k4(j, ls, lm, scales_out);
  }
  d_out = fp32_to_fp16(max_scale / 63.f);
  dmin_out = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales_out, sc, m);
    const float d = fp16_to_fp32(d_out) * sc;
    if (!d) continue;
    const float dm = fp16_to_fp32(dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_k4_levels(x, 15, -1.f, 0.1f, 20, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q5_k(const float* x, BlockQ5K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_k4_levels(x, 31, -0.5f, 0.1f, 15, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
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
}

void quantize_q6_k(const float* x, BlockQ6K* y, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, kQK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;  // ggml uses 127 (not 128) so that |q| ≤ 127
    for (int j = 0; j < kQK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

// ---- 32-value formats (ggml's quantize_row_q{4,5}_{0,1}_ref). Value j of a block goes to the low
// nibble of byte j % 16 (j < 16) or its high nibble, the fifth bit to bit j of qh. The float
// steps are ggml's: levels by truncating x·id + offset to int8 (x·id ≥ −0.5 after the offset).

// Symmetric (Q4_0: nmax 8, Q5_0: 16): d = max/−nmax from the value of largest magnitude, so that
// it maps to level 0; q = min(2·nmax − 1, trunc(x/d + nmax + 0.5)).
template <int kNmax>
void quantize_sym_block(const float* x, uint16_t& d16, uint8_t* qs, uint8_t* qh) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK8_0; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  const float d = max / -kNmax;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  d16 = fp32_to_fp16(d);
  uint32_t h = 0;
  for (int j = 0; j < kQK8_0 / 2; ++j) {
    const float x0 = x[j] * id, x1 = x[j + 16] * id;
    const int q0 = std::min(2 * kNmax - 1, static_cast<int>(static_cast<int8_t>(x0 + (kNmax + 0.5f))));
    const int q1 = std::min(2 * kNmax - 1, static_cast<int>(static_cast<int8_t>(x1 + (kNmax + 0.5f))));
    qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    h |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  if (qh) std::memcpy(qh, &h, 4);
}

// With a min (Q4_1: 15 steps, Q5_1: 31): d = (max − min)/steps, m = min, q = trunc((x − min)/d + 0.5)
// (Q4_1 also capped at 15, as ggml does).
template <int kSteps>
void quantize_min_block(const float* x, uint16_t& d16, uint16_t& m16, uint8_t* qs, uint8_t* qh) {
  float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
  for (int j = 0; j < kQK8_0; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / kSteps;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  d16 = fp32_to_fp16(d);
  m16 = fp32_to_fp16(min);
  uint32_t h = 0;
  for (int j = 0; j < kQK8_0 / 2; ++j) {
    const float x0 = (x[j] - min) * id, x1 = (x[j + 16] - min) * id;
    int q0, q1;
    if constexpr (kSteps == 15) {
      q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f)));
      q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f)));
    } else {
      q0 = static_cast<uint8_t>(x0 + 0.5f);
      q1 = static_cast<uint8_t>(x1 + 0.5f);
    }
    qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    h |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  if (qh) std::memcpy(qh, &h, 4);
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_sym_block<8>(x + i * kQK8_0, y[i].d, y[i].qs, nullptr);
}
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_sym_block<16>(x + i * kQK8_0, y[i].d, y[i].qs, y[i].qh);
}
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_min_block<15>(x + i * kQK8_0, y[i].d, y[i].m, y[i].qs, nullptr);
}
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) quantize_min_block<31>(x + i * kQK8_0, y[i].d, y[i].m, y[i].qs, y[i].qh);
}

// ---- IQ4_NL: ggml's quantize_row_iq4_nl_ref (what ggml-cpu's from_float writes into a KV cache),
// i.e. quantize_row_iq4_nl_impl with one 32-value block, no importance weights and ntry = −1: the
// levels nearest x·(−127/max) on the grid (iq4nl_nearest_level), then the least-squares scale
// d = Σw·q·x / Σw·q² (w = x²) for those levels; no scale search (that is llama-quantize's
// quantize_iq4_nl, ntry 7) and no re-choice of levels.

// L: the levels, kept from block to block as ggml keeps its stack array: a block of (near-)zeros
// gets d = 0 and the previous block's levels (ggml's first block would get whatever its stack held;
// Ferry's gets zeros — the values are 0 either way).
void quantize_iq4_nl_block(const float* x, BlockIQ4NL& y, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK8_0; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  float d = 0;
  if (amax >= kGroupMaxEps) {
    const float id = 1 / (max / kIq4nlValues[0]);
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kQK8_0; ++j) {
      const int l = iq4nl_nearest_level(id * x[j]);
      L[j] = static_cast<uint8_t>(l);
      const float q = kIq4nlValues[l];
      const float w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  }
  y.d = fp32_to_fp16(d);
  for (int j = 0; j < 16; ++j) y.qs[j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

void quantize_iq4_nl(const float* x, BlockIQ4NL* y, int64_t nb) {
  uint8_t L[kQK8_0] = {};
  for (int64_t i = 0; i < nb; ++i) quantize_iq4_nl_block(x + i * kQK8_0, y[i], L);
}

}  // namespace

void quantize_row_ref(GgmlType t, const float* src, void* dst, int64_t n) {
  const int64_t nb = check_row(t, n, "quantize_row_ref");
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb); return;
    case GgmlType::Q4_K: quantize_q4_k(src, static_cast<BlockQ4K*>(dst), nb); return;
    case GgmlType::Q5_K: quantize_q5_k(src, static_cast<BlockQ5K*>(dst), nb); return;
    case GgmlType::Q6_K: quantize_q6_k(src, static_cast<BlockQ6K*>(dst), nb); return;
    case GgmlType::Q8_K: quantize_q8_k(src, dst, n); return;
    case GgmlType::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb); return;
    case GgmlType::Q4_1: quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb); return;
    case GgmlType::Q5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb); return;
    case GgmlType::Q5_1: quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb); return;
    case GgmlType::IQ4_NL: quantize_iq4_nl(src, static_cast<BlockIQ4NL*>(dst), nb); return;
    default: break;
  }
  fail(ErrorKind::unsupported, "quantize_row_ref: no CPU quantizer for type {}", type_name(t));
}

}  // namespace ferry::cpu
