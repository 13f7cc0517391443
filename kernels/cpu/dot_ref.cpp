// Scalar reference dot products: ggml's *_generic vec_dot loops (same integer sums, same float
// accumulation structure), the yardstick the SIMD paths are tested against.
#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_kernels.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_check.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu {
namespace {

float dot_f32(int64_t n, const float* w, const float* x) {
  // ggml_vec_dot_f32 without SIMD accumulates in double; we do the same for the reference.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i] * x[i]);
  return static_cast<float>(sum);
}

float dot_f16(int64_t n, const uint16_t* w, const uint16_t* x) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(w[i]) * fp16_to_fp32(x[i]));
  return static_cast<float>(sum);
}

float dot_bf16(int64_t n, const uint16_t* w, const uint16_t* x) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(w[i]) * bf16_to_fp32(x[i]));
  return static_cast<float>(sum);
}

float dot_q8_0(int64_t nb, const BlockQ8_0* w, const BlockQ8_0* x) {
  float sumf = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += w[ib].qs[j] * x[ib].qs[j];
    sumf += sumi * (fp16_to_fp32(w[ib].d) * fp16_to_fp32(x[ib].d));
  }
  return sumf;
}

// Shared tail of the K-quant references: aux8 holds the 256 weight levels of one block, scale(j)
// the integer scale of 16-value group j; accumulates Σ scale·q·y in 8 int32 lanes as ggml does.
template <typename ScaleOf>
void accumulate_k(const int8_t* aux8, const int8_t* q8, ScaleOf scale, int32_t* aux32) {
  int16_t aux16[8];
  for (int j = 0; j < kQK_K / 16; ++j) {
    const int32_t s = scale(j);
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 8; ++l) aux16[l] = static_cast<int16_t>(q8[l] * aux8[l]);
      for (int l = 0; l < 8; ++l) aux32[l] += s * aux16[l];
      q8 += 8;
      aux8 += 8;
    }
  }
}

// Unpacks the 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K/Q5_K block.
void unpack_scales_mins(const uint8_t* packed, uint8_t* out16) {
  for (int j = 0; j < 8; ++j) scale_min_k4(j, packed, out16[j], out16[8 + j]);
}

template <typename Block, bool kFifthBit>
float dot_q45_k(int64_t nb, const Block* w, const BlockQ8K* x) {
  float sums[8] = {};
  float sumf = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t aux8[kQK_K];
    int8_t* a = aux8;
    const uint8_t* q4 = w[i].qs;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K / 64; ++j, q4 += 32) {
      for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(q4[l] & 0xF);
      if constexpr (kFifthBit)
        for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(a[l] + (w[i].qh[l] & m ? 16 : 0));
      a += 32;
      m = static_cast<uint8_t>(m << 1);
      for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(q4[l] >> 4);
      if constexpr (kFifthBit)
        for (int l = 0; l < 32; ++l) a[l] = static_cast<int8_t>(a[l] + (w[i].qh[l] & m ? 16 : 0));
      a += 32;
      m = static_cast<uint8_t>(m << 1);
    }
    uint8_t sm[16];
    unpack_scales_mins(w[i].scales, sm);
    int sumi = 0;
    for (int j = 0; j < kQK_K / 16; ++j) sumi += x[i].bsums[j] * sm[8 + j / 2];
    int32_t aux32[8] = {};
    accumulate_k(aux8, x[i].qs, [&](int j) { return int32_t{sm[j / 2]}; }, aux32);
    const float d = fp16_to_fp32(w[i].d) * x[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
    const float dmin = fp16_to_fp32(w[i].dmin) * x[i].d;
    sumf -= dmin * sumi;
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float dot_q6_k(int64_t nb, const BlockQ6K* w, const BlockQ8K* x) {
  float sums[8] = {};
  float sumf = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t aux8[kQK_K];
    int8_t* a = aux8;
    const uint8_t* ql = w[i].ql;
    const uint8_t* qh = w[i].qh;
    for (int j = 0; j < kQK_K; j += 128, a += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        a[l + 0] = static_cast<int8_t>(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        a[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        a[l + 64] = static_cast<int8_t>(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        a[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int32_t aux32[8] = {};
    accumulate_k(aux8, x[i].qs, [&](int j) { return int32_t{w[i].scales[j]}; }, aux32);
    const float d = fp16_to_fp32(w[i].d) * x[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float dot_one(GgmlType t, int64_t n, const void* w, const void* x) {
  switch (t) {
    case GgmlType::F32: return dot_f32(n, static_cast<const float*>(w), static_cast<const float*>(x));
    case GgmlType::F16:
      return dot_f16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x));
    case GgmlType::BF16:
      return dot_bf16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x));
    case GgmlType::Q8_0:
      return dot_q8_0(n / kQK8_0, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(x));
    case GgmlType::Q4_K:
      return dot_q45_k<BlockQ4K, false>(n / kQK_K, static_cast<const BlockQ4K*>(w),
                                        static_cast<const BlockQ8K*>(x));
    case GgmlType::Q5_K:
      return dot_q45_k<BlockQ5K, true>(n / kQK_K, static_cast<const BlockQ5K*>(w),
                                       static_cast<const BlockQ8K*>(x));
    case GgmlType::Q6_K:
      return dot_q6_k(n / kQK_K, static_cast<const BlockQ6K*>(w), static_cast<const BlockQ8K*>(x));
    default: return 0.0f;  // unreachable: callers check the type
  }
}

template <GgmlType T>
void dot_nx(int64_t n, const void* w, const void* x, size_t x_stride, int nx, float* out) {
  for (int j = 0; j < nx; ++j) out[j] = dot_one(T, n, w, static_cast<const uint8_t*>(x) + j * x_stride);
}

constexpr detail::DotKernels kScalar{
    dot_nx<GgmlType::F32>,  dot_nx<GgmlType::F16>,  dot_nx<GgmlType::BF16>, dot_nx<GgmlType::Q8_0>,
    dot_nx<GgmlType::Q4_K>, dot_nx<GgmlType::Q5_K>, dot_nx<GgmlType::Q6_K>,
};

}  // namespace

const detail::DotKernels& detail::dot_kernels_scalar() { return kScalar; }

float vec_dot_ref(GgmlType w, const void* wrow, const void* xq, int64_t n) {
  check_row(w, n, "vec_dot_ref");
  if (!detail::dot_fn(kScalar, w))
    fail(ErrorKind::unsupported, "vec_dot_ref: type {} is not a weight type", type_name(w));
  return dot_one(w, n, wrow, xq);
}

float vec_dot(GgmlType w, const void* wrow, const void* xq, int64_t n) {
  check_row(w, n, "vec_dot");
  const detail::DotFn f = detail::dot_fn(detail::dot_kernels(active_isa()), w);
  if (!f) fail(ErrorKind::unsupported, "vec_dot: type {} is not a weight type", type_name(w));
  float out;
  f(n, wrow, xq, 0, 1, &out);
  return out;
}

}  // namespace ferry::cpu
