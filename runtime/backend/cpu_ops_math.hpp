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
// request_exp_form() selects one explicitly (to match a native AVX-512 ggml build; the `ferry`
// binary calls it from FERRY_EXP_FORM=avx512|avx2|sse2, runtime/cli/main.cpp, docs/options.md).
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry::cpu_math {

enum class ExpForm { sse2 = 4, avx2 = 8, avx512 = 16 };  // value: chunk width
// The form in use: the requested one where the active ISA (cpu::active_isa()) has it, else AVX2
// when it has AVX2, else SSE2.
ExpForm active_exp_form();
// Process-wide, like cpu::set_isa; nullopt: back to the default.
void request_exp_form(std::optional<ExpForm> f);
std::optional<ExpForm> exp_form_from_name(std::string_view name);  // "avx512" | "avx2" | "sse2"

// y[i] = silu(x[i]) · g[i], as ggml_vec_swiglu_f32. Chunks start at x[0]: pass whole rows (or
// segments starting at a multiple of 16 from the row start) to get ggml's bits.
void swiglu(const float* x, const float* g, float* y, int64_t n);

// y[i] = exp(x[i] − max), returning Σ y accumulated as ggml_vec_soft_max_f32 does (per-chunk float
// reduction added into a double). Entries of −inf give 0.
double exp_sum(const float* x, float* y, int64_t n, float max);

// y[i] = silu(x[i]), as ggml_vec_silu_f32 (the same lanes as swiglu's SiLU; times 1 is exact).
void silu(const float* x, float* y, int64_t n);

// The same with a given form (tests compare the forms against a scalar model of each).
void swiglu(ExpForm f, const float* x, const float* g, float* y, int64_t n);
double exp_sum(ExpForm f, const float* x, float* y, int64_t n, float max);

// Scalar models of one chunk lane (for tests): the exp of each form.
float expf_form(ExpForm f, float x);

// Dot products in the order of ggml's tiled products (llamafile's tinyBLAS, which ggml uses for
// F32 and F16 matrices — projections of F32/F16 models, the F32 router, attention over the KV
// cache): W lanes (tiled_lanes(): 8 in AVX2 builds, 16 in AVX-512 ones), lane l accumulating
// elements l, l + W, ... with FMA, then a fixed tree over the lanes (lane_tree). With it, F32
// products are bit-identical to the oracle's; that matters beyond the last bit because F16
// rounding of attention probabilities and int8 rounding of activations turn 1-ulp differences
// into 1e-4 ones, which can flip near-tied expert choices further on.
int tiled_lanes();
// W = 8: tinyBLAS's hsum(__m256); W = 16: _mm512_reduce_add_ps. l: W partial sums.
float lane_tree(const float* l, int W);
// Σ k[i]·q[i] in that order; k is F16 (k16) or F32, q is F32 (already rounded to F16 values by the
// caller when ggml would convert it).
float dot_lanes(const void* k, bool k16, const float* q, int32_t n, int W);
float dot_lanes_scalar(const void* k, bool k16, const float* q, int32_t n, int W);  // model, for tests
// acc[d] = fma(p, v[d], acc[d]) for d < n: one lane step of a product whose inner index is j.
void axpy_fma(float p, const float* v, float* acc, int32_t n);
// An F16 accumulator, as ggml's flash attention keeps it for an F16 V (each step rounded to F16):
// acc[d] = f16(fma(f32(v[d]), p, f32(acc[d]))) and acc[d] = f16(f32(acc[d])·s). F16C where the
// CPU has it (the same round-to-nearest-even as fp32_to_fp16).
void axpy_f16(float p, const uint16_t* v, uint16_t* acc, int32_t n);
void scale_f16(float s, uint16_t* acc, int32_t n);

// Σ w[i]·x[i] in the order of ggml_vec_dot_f32 / ggml_vec_dot_f16 (what ggml's expert products
// use for F32/F16 experts): four accumulators of W lanes over steps of 4·W, folded pairwise, a lane
// tree, then the tail added in double. w and x are both F16 (w16) or both F32.
float dot_vecdot(const void* w, const void* x, bool w16, int32_t n);

// The final reduction of ggml_vec_dot_f32 / _f16 (AVX2 build) over its 32 partial sums, slot s
// holding elements i ≡ s (mod 32): for a caller that accumulates those slots itself (vectorised
// over another index) with FMAs in element order.
float vecdot_tree(const float* slots32);

// NEOX rotation of one pair as ggml's compiled code rounds it (GCC contracts its expressions into
// FMAs in FMA builds): x0' = fma(x0, c, −x1·s), x1' = fma(x0, s, x1·c); plain products without FMA.
void rotate_pairs(float* x0, float* x1, const float* cs, int32_t n_pairs);

}  // namespace ferry::cpu_math
