#pragma once
// Internal to the scalar reference dot products (dot_ref*.cpp, all built for the baseline ISA;
// no SIMD file includes this): the entry points of the per-family files and helpers they share.
#include <cstdint>

#include "kernels/cpu/dot_kernels.hpp"
#include "runtime/core/types.hpp"

namespace ferry::cpu::ref {

// ggml's hsum_float_8 over 8 partial sums: lanes l and l+4 first, then (0,2) and (1,3), then the two.
inline float hsum8(const float* l) {
  const float h0 = l[4] + l[0], h1 = l[5] + l[1], h2 = l[6] + l[2], h3 = l[7] + l[3];
  return (h0 + h2) + (h1 + h3);
}

// Dot of one weight row (n values) with one activation row in vec_dot_type(t), added in order o;
// o is one the type has (dot_fn in dot_kernels.hpp).
// dot_ref_legacy.cpp: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4.
float dot_legacy(GgmlType t, detail::DotOrder o, int64_t n, const void* w, const void* x);
// dot_ref_kquants.cpp: Q2_K, Q3_K, IQ4_XS.
float dot_kquant(GgmlType t, detail::DotOrder o, int64_t n, const void* w, const void* x);

}  // namespace ferry::cpu::ref
