// Activation-side quantization: what a float activation row becomes before it is dotted with a
// weight row, chosen as ggml's CPU backend does (vec_dot_type) so that our logits stay close to
// llama.cpp's.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_check.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu {
namespace {

// ggml-cpu's x86 quantize_row_q8_0 (the AVX path llama.cpp runs on these machines), which
// differs from quantize_row_q8_0_ref in two details: it multiplies by 127/amax instead of
// 1/(amax/127), and it rounds half to even (vroundps) instead of half away from zero.
void quantize_q8_0_activation(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    y[i].d = fp32_to_fp16(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < kQK8_0; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));  // default mode: half to even
  }
}

// ggml-cpu's x86 quantize_row_q8_1: the Q8_0 rounding above, plus s = d·Σ qs with the unrounded
// f32 d and the integer sum converted to float.
void quantize_q8_1_activation(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    y[i].d = fp32_to_fp16(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

}  // namespace

GgmlType vec_dot_type(GgmlType weight) {
  switch (weight) {
    case GgmlType::F32: return GgmlType::F32;
    case GgmlType::F16: return GgmlType::F16;
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return GgmlType::Q8_K;
    default: break;
  }
  fail(ErrorKind::unsupported, "no CPU dot product for weight type {}", type_name(weight));
}

void quantize_activation(GgmlType weight, const float* x, void* dst, int64_t n) {
  quantize_row_cpu(vec_dot_type(weight), x, dst, n);
}

void quantize_row_cpu(GgmlType t, const float* x, void* dst, int64_t n) {
  const int64_t nb = check_row(t, n, "quantize_row_cpu");
  if (t == GgmlType::Q8_0) {
    quantize_q8_0_activation(x, static_cast<BlockQ8_0*>(dst), nb);
    return;
  }
  if (t == GgmlType::Q8_1) {
    quantize_q8_1_activation(x, static_cast<BlockQ8_1*>(dst), nb);
    return;
  }
  // F32/F16/BF16 conversions round to nearest even as ggml's from_float does; Q8_K on x86 is
  // ggml's reference quantizer.
  quantize_row_ref(t, x, dst, n);
}

}  // namespace ferry::cpu
