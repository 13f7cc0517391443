#pragma once
// Internal: the per-ISA kernel entry points (dot-product tables, vectorized dequantization) behind
// vec_dot / matmul. One weight row is dotted with up to kMaxNx activation rows at once, so that
// the weight bits are unpacked once and reused (the small-batch / prefill path); nx = 1 is the
// plain vec_dot.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.hpp"
#include "runtime/core/types.hpp"

namespace ferry::cpu::detail {

inline constexpr int kMaxNx = 4;

// out[j] = Σ_c w[c]·x_j[c] for j < nx (1 ≤ nx ≤ kMaxNx), where x_j = (const uint8_t*)x + j·x_stride
// holds the row in vec_dot_type(weight) format and w is one weight row of n values
// (n a multiple of the weight's block size; checked by the callers, not here).
using DotFn = void (*)(int64_t n, const void* w, const void* x, size_t x_stride, int nx, float* out);

// Several weight rows at once: out[j·out_stride + r] = Σ_c w_r[c]·x_j[c] for r < nw
// (1 ≤ nw ≤ kMaxRows) and j < nx (1 ≤ nx ≤ kMaxNx), where w_r = (const uint8_t*)w + r·w_stride are
// weight rows of n values and x_j = (const uint8_t*)x + j·x_stride activation rows. Each result is
// bit for bit the matching DotFn's: the rows only share the unpacking work and the float steps'
// registers (one lane per weight row), which pays where a row's float step per block is as costly
// as its integer part (the repacked order of the 32-value formats: one FMA per block).
inline constexpr int kMaxRows = 16;
using DotRowsFn = void (*)(int64_t n, const void* w, size_t w_stride, int nw, const void* x, size_t x_stride, int nx,
                           float* out, size_t out_stride);

// The K-quants over many activation rows at once (Q4_K in its 4-row order: the full groups of 4
// rows of a dense product, and in its 1-row order: expert products; Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS
// in the tiled order): the activations packed lane-wise by pack_q8k_lanes, kLanes rows a pack, one
// 32-bit lane a row, so that the kernel's vector lanes are activation rows. Per 256-value block of
// a pack, kLanesBlockBytes bytes: the quants as 64 groups of four values × kLanes rows (group g,
// row k at 4·(g·kLanes + k)), then each row's d (float), then per 64-value chunk c each row's pair
// (bsums[4c] + bsums[4c+1], bsums[4c+2] + bsums[4c+3]) as two int16, then for p < 8 each row's
// pair (bsums[2p], bsums[2p+1]) as two int16. Rows past nx are zero.
inline constexpr int kLanes = 16;
inline constexpr int kLanesWeightRows = 4;
inline constexpr size_t kLanesDOffset = 64 * kLanes * 4;
inline constexpr size_t kLanesBsumOffset = kLanesDOffset + kLanes * 4;
inline constexpr size_t kLanesBsum16Offset = kLanesBsumOffset + 4 * kLanes * 4;
inline constexpr size_t kLanesBlockBytes = kLanesBsum16Offset + 8 * kLanes * 4;
// Packs nx ≤ kLanes Q8_K activation rows (x_stride bytes apart) of nb blocks into dst
// (nb·kLanesBlockBytes bytes).
void pack_q8k_lanes(const void* x, size_t x_stride, int nx, int64_t nb, uint8_t* dst);
// out[j·out_stride + r] for r < nw (≤ kLanesWeightRows) weight rows of n values, w_stride bytes
// apart, and j < nx activation rows, packed kLanes a pack, pack_stride bytes apart.
using LanesFn = void (*)(int64_t n, const void* w, size_t w_stride, int nw, const uint8_t* packs, size_t pack_stride,
                         int64_t nx, float* out, size_t out_stride);

// One field per (weight type, order). The plain name is the order of ggml's x86 vec_dot
// (what vec_dot / vec_dot_ref compute); the others are the same products added in the orders of
// llama.cpp's other x86 CPU kernels (dot_ref*.cpp):
//   *_group4:   Q4_K's repacked 4-row kernel (full groups of 4 rows of a dense product);
//   *_tiled:    ggml's tiled K-quant kernel (products of 8 or more activation rows);
//   *_repacked: the repacked 8-row gemv/gemm of the 32-value 4-bit formats (every matrix with a
//               multiple of 8 rows);
//   *_tinyblas: llamafile's tinyBLAS (dense products of 2+ rows), where it adds unlike vec_dot.
struct DotKernels {
  DotFn f32, f16, bf16, q8_0, q4_k, q5_k, q6_k;
  DotFn q4_k_group4, q5_k_tiled, q6_k_tiled;
  // 32-value formats (dot_ref_legacy.cpp, dot_legacy_avx2.cpp)
  DotFn q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4;
  DotFn q4_0_repacked, iq4_nl_repacked, mxfp4_repacked, iq4_nl_tinyblas;
  // Q2_K, Q3_K, IQ4_XS (dot_ref_kquants.cpp, dot_kquants_avx2.cpp)
  DotFn q2_k, q3_k, iq4_xs, q2_k_tiled, q3_k_tiled, iq4_xs_tiled;
  // Several rows at once in the repacked order (dot_rows_avx512_impl.hpp) and in Q4_K's 1-row order
  // (dot_rows_q4k_avx512_impl.hpp); nullptr where the ISA has none, and matmul then calls the DotFn
  // row by row.
  DotRowsFn q4_0_repacked_rows = nullptr, iq4_nl_repacked_rows = nullptr, mxfp4_repacked_rows = nullptr;
  DotRowsFn q4_k_rows = nullptr;
  // The repacked order on the sixteen-row interleaved layout (rows16.hpp): whole groups of
  // kMaxRows rows, w at the group's start; nullptr where the ISA has none.
  DotRowsFn q4_0_rows16 = nullptr, iq4_nl_rows16 = nullptr, mxfp4_rows16 = nullptr;
  // With lane-packed activations, or nullptr: Q4_K's 4-row and 1-row orders
  // (dot_lanes_q4k_avx512_impl.hpp), the tiled order of Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS
  // (dot_lanes_kquants_avx512_impl.hpp).
  LanesFn q4_k_group4_lanes = nullptr, q4_k_lanes = nullptr;
  LanesFn q2_k_tiled_lanes = nullptr, q3_k_tiled_lanes = nullptr, iq4_xs_tiled_lanes = nullptr;
  LanesFn q5_k_tiled_lanes = nullptr, q6_k_tiled_lanes = nullptr;
};

// Which of those orders a product uses (matmul.cpp decides, as llama.cpp does).
enum class DotOrder { row, group4, tiled, repacked, tinyblas };

const DotKernels& dot_kernels_scalar();      // dot_ref.cpp
const DotKernels& dot_kernels_avx2();        // dot_avx2.cpp, only after a run-time check
const DotKernels& dot_kernels_avx512();      // dot_avx512.cpp
const DotKernels& dot_kernels_avx512vnni();  // dot_avx512vnni.cpp
// The AVX2 entries of the 32-value formats (dot_legacy_avx2.cpp) and of Q2_K, Q3_K, IQ4_XS
// (dot_kquants_avx2.cpp), written into a table; only after the run-time check.
void add_legacy_avx2(DotKernels& k);
void add_kquants_avx2(DotKernels& k);

inline const DotKernels& dot_kernels(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::avx512vnni: return dot_kernels_avx512vnni();
    case Isa::avx512: return dot_kernels_avx512();
    case Isa::avx2: return dot_kernels_avx2();
#endif
    default: return dot_kernels_scalar();
  }
}

// Vectorized dequantization (dequant_avx2.cpp; bit-exact with dequantize_row_ref). Returns false
// for types it does not cover. Only called when the CPU has AVX2.
bool dequantize_row_avx2(GgmlType t, const void* src, float* dst, int64_t n);

// The kernel for weight type w in order o (the row order where the type has no other), or nullptr
// when there is none.
inline DotFn dot_fn(const DotKernels& k, GgmlType w, DotOrder o = DotOrder::row) {
  switch (w) {
    case GgmlType::F32: return k.f32;
    case GgmlType::F16: return k.f16;
    case GgmlType::BF16: return k.bf16;
    case GgmlType::Q8_0: return k.q8_0;
    case GgmlType::Q4_K: return o == DotOrder::group4 ? k.q4_k_group4 : k.q4_k;
    case GgmlType::Q5_K: return o == DotOrder::tiled ? k.q5_k_tiled : k.q5_k;
    case GgmlType::Q6_K: return o == DotOrder::tiled ? k.q6_k_tiled : k.q6_k;
    case GgmlType::Q4_0: return o == DotOrder::repacked ? k.q4_0_repacked : k.q4_0;  // tinyBLAS = vec_dot
    case GgmlType::Q4_1: return k.q4_1;
    case GgmlType::Q5_0: return k.q5_0;  // tinyBLAS adds as vec_dot
    case GgmlType::Q5_1: return k.q5_1;
    case GgmlType::IQ4_NL:
      return o == DotOrder::repacked ? k.iq4_nl_repacked : o == DotOrder::tinyblas ? k.iq4_nl_tinyblas : k.iq4_nl;
    case GgmlType::MXFP4: return o == DotOrder::repacked ? k.mxfp4_repacked : k.mxfp4;
    case GgmlType::Q2_K: return o == DotOrder::tiled ? k.q2_k_tiled : k.q2_k;
    case GgmlType::Q3_K: return o == DotOrder::tiled ? k.q3_k_tiled : k.q3_k;
    case GgmlType::IQ4_XS: return o == DotOrder::tiled ? k.iq4_xs_tiled : k.iq4_xs;
    default: return nullptr;
  }
}

// The several-rows kernel for weight type w in order o, or nullptr when there is none.
inline DotRowsFn dot_rows_fn(const DotKernels& k, GgmlType w, DotOrder o) {
  if (w == GgmlType::Q4_K) return o == DotOrder::row ? k.q4_k_rows : nullptr;
  if (o != DotOrder::repacked) return nullptr;
  switch (w) {
    case GgmlType::Q4_0: return k.q4_0_repacked_rows;
    case GgmlType::IQ4_NL: return k.iq4_nl_repacked_rows;
    case GgmlType::MXFP4: return k.mxfp4_repacked_rows;
    default: return nullptr;
  }
}

// The interleaved-layout kernel for weight type w, or nullptr when the ISA (or the type) has none.
inline DotRowsFn dot_rows16_fn(const DotKernels& k, GgmlType w) {
  switch (w) {
    case GgmlType::Q4_0: return k.q4_0_rows16;
    case GgmlType::IQ4_NL: return k.iq4_nl_rows16;
    case GgmlType::MXFP4: return k.mxfp4_rows16;
    default: return nullptr;
  }
}

}  // namespace ferry::cpu::detail
