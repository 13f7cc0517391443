#pragma once
// Internal: the per-ISA kernel entry points (dot-product tables, vectorized dequantization) behind vec_dot / matmul. One weight row is dotted
// with up to kMaxNx activation rows at once, so that the weight bits are unpacked once and reused
// (the small-batch / prefill path); nx = 1 is the plain vec_dot.
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

struct DotKernels {
  DotFn f32, f16, bf16, q8_0, q4_k, q5_k, q6_k;
  // The same products added in the orders of llama.cpp's other x86 CPU kernels (dot_ref.cpp):
  // Q4_K as its repacked 4-row kernel (full groups of 4 rows of a dense product), Q5_K/Q6_K as
  // its tiled kernel (products of 8 or more activation rows).
  DotFn q4_k_group4, q5_k_tiled, q6_k_tiled;
};

// Which of those orders a product uses (matmul.cpp decides, as llama.cpp does).
enum class DotOrder { row, group4, tiled };

const DotKernels& dot_kernels_scalar();      // dot_ref.cpp
const DotKernels& dot_kernels_avx2();        // dot_avx2.cpp, only after a run-time check
const DotKernels& dot_kernels_avx512();      // dot_avx512.cpp
const DotKernels& dot_kernels_avx512vnni();  // dot_avx512vnni.cpp

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
    default: return nullptr;
  }
}

}  // namespace ferry::cpu::detail
