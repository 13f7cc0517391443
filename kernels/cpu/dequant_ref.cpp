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
    default: break;
  }
  fail(ErrorKind::unsupported, "dequantize_row_ref: no CPU kernel for type {}", type_name(t));
}

}  // namespace ferry::cpu
