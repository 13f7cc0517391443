// Scalar reference dot products of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4)
// with Q8_0 / Q8_1 activations, in the orders of llama.cpp's x86 kernels (AVX2 build):
//   vec_dot (ggml-cpu/arch/x86/quants.c): 8 float lanes; lane l takes, per block, the integer sum
//     of products 4l..4l+3 times d_w·d_x with one FMA. Q4_1/Q5_1 add the min term m_w·s_x per block
//     in a separate scalar sum (one FMA each: GCC contracts ggml's `summs += m·s`), added after the
//     lanes' hsum. IQ4_NL and MXFP4 keep two lane accumulators, even blocks in the first and odd
//     blocks in the second, summed lane-wise before the hsum; an odd last block is added to that
//     hsum in scalar (one FMA with its integer sum).
//   tinyBLAS (llamafile sgemm; dense products of 2+ rows when the matrix is not repacked): Q4_0 and
//     Q5_0 as their vec_dot; IQ4_NL with a single lane accumulator.
//   repacked (ggml-cpu/arch/x86/repack.cpp, q4_0 / iq4_nl / mxfp4 8x8 gemv and gemm; every matrix
//     with a multiple of 8 rows): one scalar chain, acc = fma(Σ w·x, d_w·d_x, acc) per block.
#include <cmath>
#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_ref_internal.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu::ref {
namespace {

using detail::DotOrder;

inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
inline int fifth_bit(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return static_cast<int>((h >> j) & 1);
}

// The 32 integer levels of a block in value order (signed for the symmetric formats, the unsigned
// q of Q4_1/Q5_1) and its float scale.
void levels(const BlockQ4_0& b, int* v) { for (int j = 0; j < 32; ++j) v[j] = nibble(b.qs, j) - 8; }
void levels(const BlockQ4_1& b, int* v) { for (int j = 0; j < 32; ++j) v[j] = nibble(b.qs, j); }
void levels(const BlockQ5_0& b, int* v) {
  for (int j = 0; j < 32; ++j) v[j] = (nibble(b.qs, j) | (fifth_bit(b.qh, j) << 4)) - 16;
}
void levels(const BlockQ5_1& b, int* v) {
  for (int j = 0; j < 32; ++j) v[j] = nibble(b.qs, j) | (fifth_bit(b.qh, j) << 4);
}
void levels(const BlockIQ4NL& b, int* v) { for (int j = 0; j < 32; ++j) v[j] = kIq4nlValues[nibble(b.qs, j)]; }
void levels(const BlockMXFP4& b, int* v) { for (int j = 0; j < 32; ++j) v[j] = kMxfp4Values[nibble(b.qs, j)]; }

template <typename B>
float scale(const B& b) { return fp16_to_fp32(b.d); }
template <>
float scale(const BlockMXFP4& b) { return e8m0_to_fp32_half(b.e); }

// The 8 lane sums (products 4l..4l+3) of one block; their total is the block's integer sum.
template <typename B, typename A>
void lane_sums(const B& w, const A& x, int32_t* s) {
  int v[32];
  levels(w, v);
  for (int l = 0; l < 8; ++l) {
    s[l] = 0;
    for (int k = 4 * l; k < 4 * l + 4; ++k) s[l] += v[k] * x.qs[k];
  }
}

template <typename B, typename A>
int32_t block_sum(const B& w, const A& x) {
  int32_t s[8];
  lane_sums(w, x, s);
  int32_t t = 0;
  for (int l = 0; l < 8; ++l) t += s[l];
  return t;
}

// vec_dot of Q4_0 / Q5_0 (and their tinyBLAS order), tinyBLAS of IQ4_NL; kMin: Q4_1 / Q5_1.
template <typename B, typename A, bool kMin>
float dot_lanes(int64_t nb, const B* w, const A* x) {
  float lanes[8] = {};
  float mins = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int32_t s[8];
    lane_sums(w[i], x[i], s);
    const float d = scale(w[i]) * fp16_to_fp32(x[i].d);
    if constexpr (kMin) mins = std::fma(fp16_to_fp32(w[i].m), fp16_to_fp32(x[i].s), mins);
    for (int l = 0; l < 8; ++l) lanes[l] = std::fma(d, static_cast<float>(s[l]), lanes[l]);
  }
  if constexpr (kMin) return hsum8(lanes) + mins;
  return hsum8(lanes);
}

// vec_dot of IQ4_NL / MXFP4: two accumulators and a scalar tail; the scale product is d_x·d_w.
template <typename B>
float dot_pairs(int64_t nb, const B* w, const BlockQ8_0* x) {
  float acc[2][8] = {};
  int64_t i = 0;
  for (; i + 1 < nb; i += 2)
    for (int h = 0; h < 2; ++h) {
      int32_t s[8];
      lane_sums(w[i + h], x[i + h], s);
      const float d = fp16_to_fp32(x[i + h].d) * scale(w[i + h]);
      for (int l = 0; l < 8; ++l) acc[h][l] = std::fma(d, static_cast<float>(s[l]), acc[h][l]);
    }
  float lanes[8];
  for (int l = 0; l < 8; ++l) lanes[l] = acc[0][l] + acc[1][l];
  float sum = hsum8(lanes);
  if (i < nb) sum = std::fma(fp16_to_fp32(x[i].d) * scale(w[i]), static_cast<float>(block_sum(w[i], x[i])), sum);
  return sum;
}

// The repacked gemv/gemm: one chain per (weight row, activation row).
template <typename B>
float dot_chain(int64_t nb, const B* w, const BlockQ8_0* x) {
  float acc = 0;
  for (int64_t i = 0; i < nb; ++i)
    acc = std::fma(static_cast<float>(block_sum(w[i], x[i])), scale(w[i]) * fp16_to_fp32(x[i].d), acc);
  return acc;
}

template <typename B>
const B* as(const void* p) { return static_cast<const B*>(p); }

}  // namespace

float dot_legacy(GgmlType t, DotOrder o, int64_t n, const void* w, const void* x) {
  const int64_t nb = n / kQK8_0;
  const auto* x0 = static_cast<const BlockQ8_0*>(x);
  const auto* x1 = static_cast<const BlockQ8_1*>(x);
  switch (t) {
    case GgmlType::Q4_0:
      return o == DotOrder::repacked ? dot_chain(nb, as<BlockQ4_0>(w), x0)
                                     : dot_lanes<BlockQ4_0, BlockQ8_0, false>(nb, as<BlockQ4_0>(w), x0);
    case GgmlType::Q5_0: return dot_lanes<BlockQ5_0, BlockQ8_0, false>(nb, as<BlockQ5_0>(w), x0);
    case GgmlType::Q4_1: return dot_lanes<BlockQ4_1, BlockQ8_1, true>(nb, as<BlockQ4_1>(w), x1);
    case GgmlType::Q5_1: return dot_lanes<BlockQ5_1, BlockQ8_1, true>(nb, as<BlockQ5_1>(w), x1);
    case GgmlType::IQ4_NL:
      if (o == DotOrder::repacked) return dot_chain(nb, as<BlockIQ4NL>(w), x0);
      if (o == DotOrder::tinyblas) return dot_lanes<BlockIQ4NL, BlockQ8_0, false>(nb, as<BlockIQ4NL>(w), x0);
      return dot_pairs(nb, as<BlockIQ4NL>(w), x0);
    case GgmlType::MXFP4:
      return o == DotOrder::repacked ? dot_chain(nb, as<BlockMXFP4>(w), x0) : dot_pairs(nb, as<BlockMXFP4>(w), x0);
    default: return 0.0f;  // unreachable: dot_ref.cpp dispatches only these types here
  }
}

}  // namespace ferry::cpu::ref
