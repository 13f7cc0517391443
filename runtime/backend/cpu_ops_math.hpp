#pragma once
// exp-based elementwise math as ggml's CPU backend computes it, bit for bit. ggml evaluates exp in
// SiLU and softmax with a vectorised polynomial (ARM optimized-routines' expf: range reduction by
// ln2, degree-5 polynomial, scaling by 2^n) in chunks of the vector width, and libm's expf for the
// tail. The rounding differs from libm's expf by about one ulp; a quantized activation then
// sometimes lands on a neighbouring Q8 step, and over a few layers that becomes visible in the
// logits (NMSE ~1e-4, argmax flips at near-ties). Matching the oracle exactly avoids that.
// ggml has three forms, chosen when it is compiled: AVX-512 (F+DQ) → 16-wide, ending in scalef;
// AVX2+FMA → 8-wide, ending in fma(j, k, k); SSE2 → 4-wide without FMA. The bits differ between
// them. Default here: the AVX2 form when the CPU has AVX2 — what the usual llama.cpp builds use
// (the pip-built llama-cpp-python oracle has no AVX-512 code even on AVX-512 machines) — else SSE2.
// FERRY_EXP_FORM=avx512|avx2|sse2 selects one explicitly (to match a native AVX-512 ggml build).
#include <cstdint>

namespace ferry::cpu_math {

enum class ExpForm { sse2 = 4, avx2 = 8, avx512 = 16 };  // value: chunk width
ExpForm active_exp_form();

// y[i] = silu(x[i]) · g[i], as ggml_vec_swiglu_f32. Chunks start at x[0]: pass whole rows (or
// segments starting at a multiple of 16 from the row start) to get ggml's bits.
void swiglu(const float* x, const float* g, float* y, int64_t n);

// y[i] = exp(x[i] − max), returning Σ y accumulated as ggml_vec_soft_max_f32 does (per-chunk float
// reduction added into a double). Entries of −inf give 0.
double exp_sum(const float* x, float* y, int64_t n, float max);

// The same with a given form (tests compare the forms against a scalar model of each).
void swiglu(ExpForm f, const float* x, const float* g, float* y, int64_t n);
double exp_sum(ExpForm f, const float* x, float* y, int64_t n, float max);

// Scalar models of one chunk lane (for tests): the exp of each form.
float expf_form(ExpForm f, float x);

}  // namespace ferry::cpu_math
