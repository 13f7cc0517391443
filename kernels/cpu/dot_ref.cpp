// Scalar reference dot products, the yardstick every SIMD path must reproduce bit for bit. The float
// additions follow what llama.cpp's x86 CPU backend computes (its AVX2 kernels, which AVX-512
// builds also run for these types), so that Ferry's logits on quantized models are the oracle's:
// integer sums are exact in any order, but the float accumulation order decides the last bit,
// and on MoE models a last-bit difference can move an activation across an int8 rounding step
// and flip a near-tied expert choice. ggml's *_generic loops add differently (8 float lanes of
// 8-value groups); matching them instead would not match any x86 build of llama.cpp.
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_kernels.hpp"
#include "kernels/cpu/dot_ref_internal.hpp"
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

using ref::hsum8;

// Q8_0 as ggml's x86 kernels (vec_dot and llamafile's tinyBLAS) add: lane l (of 8) holds, per
// block, the integer sum of products 4l..4l+3 and accumulates d_w·d_x times it with one FMA per
// block; then hsum_float_8.
float dot_q8_0(int64_t nb, const BlockQ8_0* w, const BlockQ8_0* x) {
  float lanes[8] = {};
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float d = fp16_to_fp32(w[ib].d) * fp16_to_fp32(x[ib].d);
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int k = 4 * l; k < 4 * l + 4; ++k) s += w[ib].qs[k] * x[ib].qs[k];
      lanes[l] = std::fma(d, static_cast<float>(s), lanes[l]);
    }
  }
  return hsum8(lanes);
}

// Unpacks the 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K/Q5_K block.
void unpack_scales_mins(const uint8_t* packed, uint8_t* out16) {
  for (int j = 0; j < 8; ++j) scale_min_k4(j, packed, out16[j], out16[8 + j]);
}

// The 256 levels (0..15, or 0..31 with the fifth bit) of a Q4_K/Q5_K block in value order.
template <typename Block, bool kFifthBit>
void levels_q45_k(const Block& b, int8_t* a) {
  const uint8_t* q4 = b.qs;
  for (int j = 0; j < kQK_K / 64; ++j, q4 += 32, a += 64)
    for (int l = 0; l < 32; ++l) {
      int lo = q4[l] & 0xF, hi = q4[l] >> 4;
      if constexpr (kFifthBit) {
        lo += (b.qh[l] >> (2 * j)) & 1 ? 16 : 0;
        hi += (b.qh[l] >> (2 * j + 1)) & 1 ? 16 : 0;
      }
      a[l] = static_cast<int8_t>(lo);
      a[l + 32] = static_cast<int8_t>(hi);
    }
}

// Integer mins term of a Q4_K/Q5_K block: Σ_j m_j · (sum of the 32 activations of sub-block j).
int32_t mins_q45_k(const uint8_t* sm, const BlockQ8K& y) {
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += sm[8 + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  return s;
}

// Q4_K as ggml's repacked x86 kernels (q4_K_8x8, which llama.cpp uses for every Q4_K matrix with
// a multiple of 8 rows) add. Its 1-row kernel (gemv: expert products, decode, the last n mod 4
// tokens of a dense product) accumulates per block the whole integer sum Σ_j sc_j·Σ q·y and the
// integer mins term, each with one FMA, (d_w·d_y) and (dmin_w·d_y). Its 4-row kernel (gemm: the
// other tokens of a dense product; kGrouped) does the same per 64-value chunk (sub-blocks 2c and
// 2c+1). The result is scale sum − mins sum.
template <bool kGrouped>
float dot_q4_k(int64_t nb, const BlockQ4K* w, const BlockQ8K* x) {
  float acc = 0, acc_min = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t q[kQK_K];
    levels_q45_k<BlockQ4K, false>(w[i], q);
    uint8_t sm[16];
    unpack_scales_mins(w[i].scales, sm);
    const float d = fp16_to_fp32(w[i].d) * x[i].d, dmin = fp16_to_fp32(w[i].dmin) * x[i].d;
    int32_t s = 0, m = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t sj = 0;
      for (int l = 32 * j; l < 32 * j + 32; ++l) sj += q[l] * x[i].qs[l];
      s += sm[j] * sj;
      m += sm[8 + j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
      if (kGrouped ? j % 2 == 1 : j == 7) {
        acc = std::fma(static_cast<float>(s), d, acc);
        acc_min = std::fma(static_cast<float>(m), dmin, acc_min);
        s = m = 0;
      }
    }
  }
  return acc - acc_min;
}

// Q5_K as ggml's x86 vec_dot adds: 8 lanes, lane l holding per block Σ_c (sc_2c·Σ products
// 64c+4l..+3 + sc_2c+1·Σ products 64c+32+4l..+3), one FMA per block with d_w·d_y; the mins term
// summed separately, fma((−d_y·dmin_w), mins, sum) per block; hsum_float_8 of the lanes + that sum.
float dot_q5_k(int64_t nb, const BlockQ5K* w, const BlockQ8K* x) {
  float lanes[8] = {};
  float mins = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t q[kQK_K];
    levels_q45_k<BlockQ5K, true>(w[i], q);
    uint8_t sm[16];
    unpack_scales_mins(w[i].scales, sm);
    const float d = x[i].d * fp16_to_fp32(w[i].d);
    const float dmin = -x[i].d * fp16_to_fp32(w[i].dmin);
    mins = std::fma(dmin, static_cast<float>(mins_q45_k(sm, x[i])), mins);  // GCC contracts ggml's `+= a·b`
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int c = 0; c < 4; ++c)
        for (int half = 0; half < 2; ++half) {
          const int v0 = 64 * c + 32 * half + 4 * l;
          int32_t p = 0;
          for (int k = v0; k < v0 + 4; ++k) p += q[k] * x[i].qs[k];
          s += sm[2 * c + half] * p;
        }
      lanes[l] = std::fma(d, static_cast<float>(s), lanes[l]);
    }
  }
  return hsum8(lanes) + mins;
}

// The 256 unsigned levels (0..63) of a Q6_K block in value order.
void levels_q6_k(const BlockQ6K& b, int8_t* q) {
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      q[j + l + 0] = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4));
      q[j + l + 32] = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      q[j + l + 64] = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4));
      q[j + l + 96] = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
}

// Q6_K as ggml's x86 vec_dot adds: levels used unsigned (0..63); lane l holds per block the sum
// over the eight 32-value groups of sc·q·y for values 4l..4l+3 of each group, minus
// 32·(sc_2l·bsum_2l + sc_2l+1·bsum_2l+1); one FMA per block with d_w·d_y; hsum_float_8.
float dot_q6_k(int64_t nb, const BlockQ6K* w, const BlockQ8K* x) {
  float lanes[8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    int8_t q[kQK_K];
    levels_q6_k(w[i], q);
    const float d = x[i].d * fp16_to_fp32(w[i].d);
    const int8_t* sc = w[i].scales;
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int g = 0; g < 8; ++g) {
        const int v0 = 32 * g + 4 * l;
        int32_t p = 0;
        for (int k = v0; k < v0 + 4; ++k) p += q[k] * x[i].qs[k];
        s += sc[v0 / 16] * p;
      }
      s -= 32 * (sc[2 * l] * x[i].bsums[2 * l] + sc[2 * l + 1] * x[i].bsums[2 * l + 1]);
      lanes[l] = std::fma(d, static_cast<float>(s), lanes[l]);
    }
  }
  return hsum8(lanes);
}

// Q5_K / Q6_K as ggml's tiled x86 kernel adds (llama.cpp's path for products of 8 or more
// activation rows with these types): per block the exact integer sums s = Σ_j sc_j·Σ q·y (Q6_K
// with its −32 offset applied) and, for Q5_K, m = Σ_j m_j·(sum of sub-block j); the block's value
// r = d_w·s, minus dmin_w·m fused (fnmadd); accumulated as fma(r, d_y, acc).
template <bool kQ5>
float dot_k_tiled(int64_t nb, const void* wv, const BlockQ8K* x) {
  float acc = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t q[kQK_K];
    int32_t s = 0;
    float r;
    if constexpr (kQ5) {
      const BlockQ5K& b = static_cast<const BlockQ5K*>(wv)[i];
      levels_q45_k<BlockQ5K, true>(b, q);
      uint8_t sm[16];
      unpack_scales_mins(b.scales, sm);
      for (int j = 0; j < 8; ++j) {
        int32_t sj = 0;
        for (int l = 32 * j; l < 32 * j + 32; ++l) sj += q[l] * x[i].qs[l];
        s += sm[j] * sj;
      }
      r = std::fma(-fp16_to_fp32(b.dmin), static_cast<float>(mins_q45_k(sm, x[i])),
                   fp16_to_fp32(b.d) * static_cast<float>(s));
    } else {
      const BlockQ6K& b = static_cast<const BlockQ6K*>(wv)[i];
      levels_q6_k(b, q);
      for (int j = 0; j < 16; ++j) {
        int32_t sj = 0;
        for (int l = 16 * j; l < 16 * j + 16; ++l) sj += (q[l] - 32) * x[i].qs[l];
        s += b.scales[j] * sj;
      }
      r = fp16_to_fp32(b.d) * static_cast<float>(s);
    }
    acc = std::fma(r, x[i].d, acc);
  }
  return acc;
}

// Weight type t's product in order o (the row order for the types that have only that one).
float dot_one(GgmlType t, int64_t n, const void* w, const void* x, detail::DotOrder o = detail::DotOrder::row) {
  switch (t) {
    case GgmlType::F32: return dot_f32(n, static_cast<const float*>(w), static_cast<const float*>(x));
    case GgmlType::F16:
      return dot_f16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x));
    case GgmlType::BF16:
      return dot_bf16(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x));
    case GgmlType::Q8_0:
      return dot_q8_0(n / kQK8_0, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(x));
    case GgmlType::Q4_K:
      return dot_q4_k<false>(n / kQK_K, static_cast<const BlockQ4K*>(w), static_cast<const BlockQ8K*>(x));
    case GgmlType::Q5_K:
      return dot_q5_k(n / kQK_K, static_cast<const BlockQ5K*>(w), static_cast<const BlockQ8K*>(x));
    case GgmlType::Q6_K:
      return dot_q6_k(n / kQK_K, static_cast<const BlockQ6K*>(w), static_cast<const BlockQ8K*>(x));
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: return ref::dot_legacy(t, o, n, w, x);
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS: return ref::dot_kquant(t, o, n, w, x);
    default: return 0.0f;  // unreachable: callers check the type
  }
}

template <GgmlType T, detail::DotOrder O = detail::DotOrder::row>
void dot_nx(int64_t n, const void* w, const void* x, size_t x_stride, int nx, float* out) {
  for (int j = 0; j < nx; ++j) out[j] = dot_one(T, n, w, static_cast<const uint8_t*>(x) + j * x_stride, O);
}

// One of the other orders, for nx rows.
template <typename F>
void other_order_nx(F f, int64_t n, const void* w, const void* x, size_t x_stride, int nx, float* out) {
  for (int j = 0; j < nx; ++j)
    out[j] = f(n / kQK_K, w, reinterpret_cast<const BlockQ8K*>(static_cast<const uint8_t*>(x) + j * x_stride));
}
void dot_q4_k_group4(int64_t n, const void* w, const void* x, size_t s, int nx, float* out) {
  other_order_nx([](int64_t nb, const void* wv, const BlockQ8K* y) { return dot_q4_k<true>(nb, static_cast<const BlockQ4K*>(wv), y); },
                 n, w, x, s, nx, out);
}
void dot_q5_k_tiled(int64_t n, const void* w, const void* x, size_t s, int nx, float* out) {
  other_order_nx(dot_k_tiled<true>, n, w, x, s, nx, out);
}
void dot_q6_k_tiled(int64_t n, const void* w, const void* x, size_t s, int nx, float* out) {
  other_order_nx(dot_k_tiled<false>, n, w, x, s, nx, out);
}

using detail::DotOrder;
constexpr detail::DotKernels kScalar{
    .f32 = dot_nx<GgmlType::F32>,
    .f16 = dot_nx<GgmlType::F16>,
    .bf16 = dot_nx<GgmlType::BF16>,
    .q8_0 = dot_nx<GgmlType::Q8_0>,
    .q4_k = dot_nx<GgmlType::Q4_K>,
    .q5_k = dot_nx<GgmlType::Q5_K>,
    .q6_k = dot_nx<GgmlType::Q6_K>,
    .q4_k_group4 = dot_q4_k_group4,
    .q5_k_tiled = dot_q5_k_tiled,
    .q6_k_tiled = dot_q6_k_tiled,
    .q4_0 = dot_nx<GgmlType::Q4_0>,
    .q4_1 = dot_nx<GgmlType::Q4_1>,
    .q5_0 = dot_nx<GgmlType::Q5_0>,
    .q5_1 = dot_nx<GgmlType::Q5_1>,
    .iq4_nl = dot_nx<GgmlType::IQ4_NL>,
    .mxfp4 = dot_nx<GgmlType::MXFP4>,
    .q4_0_repacked = dot_nx<GgmlType::Q4_0, DotOrder::repacked>,
    .iq4_nl_repacked = dot_nx<GgmlType::IQ4_NL, DotOrder::repacked>,
    .mxfp4_repacked = dot_nx<GgmlType::MXFP4, DotOrder::repacked>,
    .iq4_nl_tinyblas = dot_nx<GgmlType::IQ4_NL, DotOrder::tinyblas>,
    .q2_k = dot_nx<GgmlType::Q2_K>,
    .q3_k = dot_nx<GgmlType::Q3_K>,
    .iq4_xs = dot_nx<GgmlType::IQ4_XS>,
    .q2_k_tiled = dot_nx<GgmlType::Q2_K, DotOrder::tiled>,
    .q3_k_tiled = dot_nx<GgmlType::Q3_K, DotOrder::tiled>,
    .iq4_xs_tiled = dot_nx<GgmlType::IQ4_XS, DotOrder::tiled>,
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
