// Scalar reference dequantization, bit-exact with ggml's dequantize_row_*: the same float
// operations in the same order (this file is built for the baseline ISA, so the compiler cannot
// contract a·b − c into an FMA and change the rounding).
#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_check.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu {
namespace {

void dequant_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

void dequant_q4_k(const BlockQ4K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    uint8_t sc, m;
    for (int is = 0; is < 8; is += 2) {  // one 64-value chunk: sub-blocks is and is+1
      scale_min_k4(is, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void dequant_q5_k(const BlockQ5K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2) {
      scale_min_k4(is, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequant_q6_k(const BlockQ6K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// ---- 32-value blocks: value j from the low nibble of qs[j % 16] (j < 16) or its high nibble.

inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
inline int fifth_bit(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return static_cast<int>((h >> j) & 1);
}

void dequant_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(nibble(x[i].qs, j) - 8) * d;
  }
}

void dequant_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(nibble(x[i].qs, j)) * d + m;
  }
}

void dequant_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j)
      y[j] = static_cast<float>((nibble(x[i].qs, j) | (fifth_bit(x[i].qh, j) << 4)) - 16) * d;
  }
}

void dequant_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK8_0; ++j)
      y[j] = static_cast<float>(nibble(x[i].qs, j) | (fifth_bit(x[i].qh, j) << 4)) * d + m;
  }
}

void dequant_iq4_nl(const BlockIQ4NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = d * kIq4nlValues[nibble(x[i].qs, j)];
  }
}

void dequant_mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < kQK8_0; ++j) y[j] = kMxfp4Values[nibble(x[i].qs, j)] * d;
  }
}

void dequant_q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = x[i].qs[j] * d;
  }
}

// ---- Q2_K, Q3_K, IQ4_XS: value 128h + 32k + l (h < 2, k < 4, l < 32) is bits 2k..2k+1 of
// qs[32h + l] for the 2-bit formats; sub-block (16 values) 8h + 2k + l / 16.

void dequant_q2_k(const BlockQ2K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    for (int s = 0; s < 16; ++s, y += 16) {  // sub-block s: h = s / 8, k = (s % 8) / 2
      const uint8_t* q = x[i].qs + 32 * (s / 8) + 16 * (s % 2);
      const int shift = 2 * ((s % 8) / 2);
      const uint8_t sc = x[i].scales[s];
      const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
    }
  }
}

void dequant_q3_k(const BlockQ3K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    int8_t sc[16];
    q3k_scales(x[i].scales, sc);
    for (int s = 0; s < 16; ++s, y += 16) {
      const int h = s / 8, k = (s % 8) / 2, l0 = 16 * (s % 2);
      const float dl = d * sc[s];
      for (int l = l0; l < l0 + 16; ++l) {
        const int q = ((x[i].qs[32 * h + l] >> (2 * k)) & 3) - ((x[i].hmask[l] >> (4 * h + k)) & 1 ? 0 : 4);
        y[l - l0] = dl * static_cast<float>(q);
      }
    }
  }
}

void dequant_iq4_xs(const BlockIQ4XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const float dl = d * static_cast<float>(iq4xs_scale(x[i], s));
      for (int j = 0; j < 32; ++j) y[j] = dl * kIq4nlValues[nibble(x[i].qs + 16 * s, j)];
    }
  }
}

void dequant_q8_k(const BlockQ8K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * x[i].qs[j];
}

}  // namespace

void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n) {
  const int64_t nb = check_row(t, n, "dequantize_row_ref");
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::Q8_0: dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return;
    case GgmlType::Q4_K: dequant_q4_k(static_cast<const BlockQ4K*>(src), dst, nb); return;
    case GgmlType::Q5_K: dequant_q5_k(static_cast<const BlockQ5K*>(src), dst, nb); return;
    case GgmlType::Q6_K: dequant_q6_k(static_cast<const BlockQ6K*>(src), dst, nb); return;
    case GgmlType::Q8_K: dequant_q8_k(static_cast<const BlockQ8K*>(src), dst, nb); return;
    case GgmlType::Q4_0: dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return;
    case GgmlType::Q4_1: dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb); return;
    case GgmlType::Q5_0: dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb); return;
    case GgmlType::Q5_1: dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb); return;
    case GgmlType::Q8_1: dequant_q8_1(static_cast<const BlockQ8_1*>(src), dst, nb); return;
    case GgmlType::IQ4_NL: dequant_iq4_nl(static_cast<const BlockIQ4NL*>(src), dst, nb); return;
    case GgmlType::MXFP4: dequant_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb); return;
    case GgmlType::Q2_K: dequant_q2_k(static_cast<const BlockQ2K*>(src), dst, nb); return;
    case GgmlType::Q3_K: dequant_q3_k(static_cast<const BlockQ3K*>(src), dst, nb); return;
    case GgmlType::IQ4_XS: dequant_iq4_xs(static_cast<const BlockIQ4XS*>(src), dst, nb); return;
    default: break;
  }
  fail(ErrorKind::unsupported, "dequantize_row_ref: no CPU kernel for type {}", type_name(t));
}

}  // namespace ferry::cpu
