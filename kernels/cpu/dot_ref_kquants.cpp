// Scalar reference dot products of Q2_K, Q3_K and IQ4_XS with Q8_K activations, in the orders of
// llama.cpp's x86 kernels (AVX2 build):
//   vec_dot (ggml-cpu/arch/x86/quants.c): 8 float lanes. Lane l takes, per block, the integer sum
//     over the eight 32-value groups g of scale·w·x for values 32g + 4l..32g + 4l + 3 (the scale of
//     the 16- or 32-value sub-block they lie in), times d_x·d_w with one FMA; then hsum_float_8.
//     Q2_K first adds its mins term to the same lanes, lane l getting
//     (−d_x·dmin_w)·(m_2l·bsum_2l + m_2l+1·bsum_2l+1) with one FMA, before the scales term.
//   tiled (ggml-cpu/tiled; products of 8 or more activation rows): per block the exact integer
//     sums s = Σ_j sc_j·Σ w·x (and Q2_K's m = Σ_j m_j·bsum_j); r = d_w·s, minus dmin_w·m fused;
//     acc = fma(r, d_x, acc). ggml repacks Q2_K only in AVX-512 builds, so the pinned AVX2 build
//     never takes that path.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_ref_internal.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu::ref {
namespace {

using detail::DotOrder;

// The 256 signed levels of a block in value order and the scale of each 16-value sub-block (for
// IQ4_XS: its 32-value sub-block's, twice).
struct Levels {
  int v[kQK_K];
  int sc[16];
};

// Value 128h + 32k + l: bits 2k..2k+1 of qs[32h + l].
inline int two_bits(const uint8_t* qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3; }

void levels(const BlockQ2K& b, Levels& L) {
  for (int i = 0; i < kQK_K; ++i) L.v[i] = two_bits(b.qs, i);
  for (int j = 0; j < 16; ++j) L.sc[j] = b.scales[j] & 0xF;
}

void levels(const BlockQ3K& b, Levels& L) {
  for (int i = 0; i < kQK_K; ++i) {
    const int hbit = (b.hmask[i % 32] >> (i / 32)) & 1;  // bit 4h + k
    L.v[i] = two_bits(b.qs, i) - (hbit ? 0 : 4);
  }
  int8_t sc[16];
  q3k_scales(b.scales, sc);
  for (int j = 0; j < 16; ++j) L.sc[j] = sc[j];
}

void levels(const BlockIQ4XS& b, Levels& L) {
  for (int i = 0; i < kQK_K; ++i) {
    const uint8_t* q = b.qs + 16 * (i / 32);
    const int j = i % 32;
    L.v[i] = kIq4nlValues[j < 16 ? q[j] & 0xF : q[j - 16] >> 4];
  }
  for (int j = 0; j < 16; ++j) L.sc[j] = iq4xs_scale(b, j / 2);
}

// Q2_K's integer mins term of lane l (vec_dot) or of the whole block (l < 0, tiled).
int32_t q2k_mins(const BlockQ2K& b, const BlockQ8K& x, int l) {
  int32_t m = 0;
  for (int j = 0; j < 16; ++j)
    if (l < 0 || j / 2 == l) m += (b.scales[j] >> 4) * x.bsums[j];
  return m;
}

template <typename B>
float dot_lanes(int64_t nb, const B* w, const BlockQ8K* x) {
  float lanes[8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    Levels L;
    levels(w[i], L);
    const float d = x[i].d * fp16_to_fp32(w[i].d);
    if constexpr (std::is_same_v<B, BlockQ2K>) {
      const float dmin = -x[i].d * fp16_to_fp32(w[i].dmin);
      for (int l = 0; l < 8; ++l) lanes[l] = std::fma(dmin, static_cast<float>(q2k_mins(w[i], x[i], l)), lanes[l]);
    }
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int g = 0; g < 8; ++g) {
        const int v0 = 32 * g + 4 * l;
        int32_t p = 0;
        for (int k = v0; k < v0 + 4; ++k) p += L.v[k] * x[i].qs[k];
        s += L.sc[v0 / 16] * p;
      }
      lanes[l] = std::fma(d, static_cast<float>(s), lanes[l]);
    }
  }
  return hsum8(lanes);
}

template <typename B>
float dot_tiled(int64_t nb, const B* w, const BlockQ8K* x) {
  float acc = 0;
  for (int64_t i = 0; i < nb; ++i) {
    Levels L;
    levels(w[i], L);
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t sj = 0;
      for (int k = 16 * j; k < 16 * j + 16; ++k) sj += L.v[k] * x[i].qs[k];
      s += L.sc[j] * sj;
    }
    float r = fp16_to_fp32(w[i].d) * static_cast<float>(s);
    if constexpr (std::is_same_v<B, BlockQ2K>)
      r = std::fma(-fp16_to_fp32(w[i].dmin), static_cast<float>(q2k_mins(w[i], x[i], -1)), r);
    acc = std::fma(r, x[i].d, acc);
  }
  return acc;
}

template <typename B>
float dot(DotOrder o, int64_t nb, const void* w, const void* x) {
  const auto* wb = static_cast<const B*>(w);
  const auto* xb = static_cast<const BlockQ8K*>(x);
  return o == DotOrder::tiled ? dot_tiled(nb, wb, xb) : dot_lanes(nb, wb, xb);
}

}  // namespace

float dot_kquant(GgmlType t, DotOrder o, int64_t n, const void* w, const void* x) {
  const int64_t nb = n / kQK_K;
  switch (t) {
    case GgmlType::Q2_K: return dot<BlockQ2K>(o, nb, w, x);
    case GgmlType::Q3_K: return dot<BlockQ3K>(o, nb, w, x);
    case GgmlType::IQ4_XS: return dot<BlockIQ4XS>(o, nb, w, x);
    default: return 0.0f;  // unreachable: dot_ref.cpp dispatches only these types here
  }
}

}  // namespace ferry::cpu::ref
