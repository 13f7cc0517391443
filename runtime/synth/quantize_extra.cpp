// The 32-value block quantizers (Q4_0, Q4_1, Q5_0, Q5_1, MXFP4) and the dispatch of
// quantize_extra.hpp; the IQ4 types are in quantize_iq4.cpp.
#include "runtime/synth/quantize_extra.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::synth {
namespace {

constexpr int kQK = 32;

void put_fp16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// The value of largest magnitude (the first of them) and that magnitude.
void abs_max(const float* x, float& amax, float& max) {
  amax = 0.0f;
  max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
}

void min_max(const float* x, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// Q4_0 (18 bytes): d (fp16), qs[16] (value j in the low nibble of byte j, j + 16 in the high one);
// x ≈ d·(q − 8) with d = max / −8.
void q4_0_block(const float* x, uint8_t* y) {
  float amax, max;
  abs_max(x, amax, max);
  const float d = max / -8;
  const float id = d ? 1.0f / d : 0.0f;
  put_fp16(y, d);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[kQK / 2 + j] * id + 8.5f)));
    y[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q4_1 (20 bytes): d, m (fp16), qs[16]; x ≈ d·q + m.
void q4_1_block(const float* x, uint8_t* y) {
  float min, max;
  min_max(x, min, max);
  const float d = (max - min) / ((1 << 4) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  put_fp16(y, d);
  put_fp16(y + 2, min);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[kQK / 2 + j] - min) * id + 0.5f)));
    y[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// The fifth bits of Q5_0 / Q5_1: bit j of the little-endian u32 qh is bit 4 of value j.
void put_q5(const uint8_t* q, uint8_t* qh_at, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[kQK / 2 + j] & 0x0F) << 4));
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[kQK / 2 + j] & 0x10u) >> 4) << (j + kQK / 2);
  }
  std::memcpy(qh_at, &qh, 4);
}

// Q5_0 (22 bytes): d (fp16), qh[4], qs[16]; x ≈ d·(q − 16) with d = max / −16.
void q5_0_block(const float* x, uint8_t* y) {
  float amax, max;
  abs_max(x, amax, max);
  const float d = max / -16;
  const float id = d ? 1.0f / d : 0.0f;
  put_fp16(y, d);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j)
    q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
  put_q5(q, y + 2, y + 6);
}

// Q5_1 (24 bytes): d, m (fp16), qh[4], qs[16]; x ≈ d·q + m.
void q5_1_block(const float* x, uint8_t* y) {
  float min, max;
  min_max(x, min, max);
  const float d = (max - min) / ((1 << 5) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  put_fp16(y, d);
  put_fp16(y + 2, min);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
  put_q5(q, y + 4, y + 8);
}

// E2M1 values doubled (ggml's kvalues_mxfp4); the scale below is halved to match.
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml_e8m0_to_fp32_half: 2^(e − 128).
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

int mxfp4_index(float x, float e) {
  int best = 0;
  float best_err = std::fabs(kMxfp4Values[0] * e - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kMxfp4Values[i] * e - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

// MXFP4 (17 bytes): e (E8M0 shared exponent), qs[16] (E2M1 codes, value j low nibble, j + 16
// high); x ≈ 2^(e − 127) · E2M1(q), e = floor(log2(amax)) − 2 + 127 so that amax lands in [4, 8)
// times the scale, under the largest code, 6.
void mxfp4_block(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  // ggml converts the float straight to uint8_t; clamped here so that a (never generated) value
  // below 2^-125 stays defined instead of wrapping.
  const int e = amax > 0.0f ? static_cast<int>(std::floor(log2f(amax)) - 2 + 127) : 0;
  y[0] = static_cast<uint8_t>(std::clamp(e, 0, 255));
  const float d = e8m0_half(y[0]);
  for (int j = 0; j < kQK / 2; ++j)
    y[1 + j] = static_cast<uint8_t>(mxfp4_index(x[j], d) | (mxfp4_index(x[kQK / 2 + j], d) << 4));
}

}  // namespace

bool quantize_extra_supports(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::MXFP4: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

bool quantize_extra_is_fast(GgmlType t) {
  return (t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS) && cpu::active_isa() >= cpu::Isa::avx2;
}

void quantize_extra_row_ref(GgmlType t, const float* src, void* dst, int64_t n) {
  const TypeInfo& ti = type_info(t);
  if (!quantize_extra_supports(t) || n % ti.block_values != 0)
    fail(ErrorKind::internal, "quantize_extra_row_ref: {} values of {}", n, ti.name);
  void (*block)(const float*, uint8_t*) = nullptr;
  switch (t) {
    case GgmlType::Q4_0: block = q4_0_block; break;
    case GgmlType::Q4_1: block = q4_1_block; break;
    case GgmlType::Q5_0: block = q5_0_block; break;
    case GgmlType::Q5_1: block = q5_1_block; break;
    case GgmlType::MXFP4: block = mxfp4_block; break;
    case GgmlType::IQ4_NL: block = iq4::quantize_nl_block; break;
    default: block = iq4::quantize_xs_block; break;
  }
  auto* y = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / ti.block_values; ++b) block(src + b * ti.block_values, y + b * ti.block_bytes);
}

void quantize_extra_rows(GgmlType t, const float* src, void* dst, int64_t n_rows, int64_t row_len) {
  const int64_t n = n_rows * row_len;
  auto* y = static_cast<uint8_t*>(dst);
  if (!quantize_extra_is_fast(t)) {
    quantize_extra_row_ref(t, src, dst, n);  // rows are whole blocks: one long row is the same
    return;
  }
  if (t == GgmlType::IQ4_XS) {
    for (int64_t b = 0; b < n / 256; ++b) iq4::quantize_xs_block_avx2(src + b * 256, y + b * iq4::kXsBytes);
    return;
  }
  const int64_t n_blocks = n / kQK;
  int64_t b = 0;
  for (; b + 8 <= n_blocks; b += 8) iq4::quantize_nl_8_blocks_avx2(src + b * kQK, y + b * iq4::kNlBytes);
  for (; b < n_blocks; ++b) iq4::quantize_nl_block(src + b * kQK, y + b * iq4::kNlBytes);
}

}  // namespace ferry::synth
