#pragma once
// Quantized formats on the CPU: scalar reference dequantization (bit-exact with ggml), reference
// quantizers, and the activation-side quantization used by dot products (as ggml does it: Q8_0,
// Q4_0, Q5_0, IQ4_NL, MXFP4 weights dot Q8_0 activations, Q4_1/Q5_1 dot Q8_1, K-quants and IQ4_XS
// dot Q8_K, F16 dot F16, BF16 dot BF16).
#include <cstdint>

#include "runtime/core/types.hpp"

namespace ferry::cpu {

// dst[n] ← src (n values of type t). n must be a multiple of the block size. All compute types
// (TypeInfo::compute).
void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n);
// Same result, vectorized where it pays (used for dequantize-to-float paths).
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Reference quantizers (round-to-nearest with the same scale search ggml's *_ref functions use);
// for synth and tests. F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K,
// Q8_K (not Q2_K, Q3_K, IQ4_XS, MXFP4). dst must hold row_bytes(t, n).
void quantize_row_ref(GgmlType t, const float* src, void* dst, int64_t n);

// What ggml-cpu's from_float writes for type t (a KV cache row, ggml_set_rows): the reference
// quantizer, except Q8_0 (and Q8_1), which x86 ggml quantizes with its SIMD quantize_row_q8_0 —
// 127/amax and round-half-even (activation.cpp). The KV cache types: F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, IQ4_NL, Q5_0, Q5_1.
void quantize_row_cpu(GgmlType t, const float* src, void* dst, int64_t n);

// Activation format a weight type is dotted with.
GgmlType vec_dot_type(GgmlType weight);
// x[n] → the vec_dot_type(weight) format (dst holds row_bytes(vec_dot_type(weight), n)).
void quantize_activation(GgmlType weight, const float* x, void* dst, int64_t n);

}  // namespace ferry::cpu
