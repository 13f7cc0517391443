// The MXFP4 quantizer and the dispatch of quantize_extra.hpp; Q4_0, Q4_1, Q5_0 and Q5_1 are
// kernels/cpu's reference quantizers (ggml's _ref), the IQ4 types are in quantize_iq4.cpp.
#include "runtime/synth/quantize_extra.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::synth {
namespace {

constexpr int kQK = 32;

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
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
      return cpu::quantize_row_ref(t, src, dst, n);  // ggml's _ref, which llama-quantize runs
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
