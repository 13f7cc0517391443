#include "runtime/backend/cpu_ops_math.hpp"

#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::cpu_math {
namespace {

// Polynomial of the expf routine (ARM optimized-routines, as ggml uses it).
constexpr float kShift = 0x1.8p23f, kInvLn2 = 0x1.715476p+0f, kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
constexpr float kC1 = 0x1.ffffecp-1f, kC2 = 0x1.fffdb6p-2f, kC3 = 0x1.555e66p-3f, kC4 = 0x1.573e2ep-5f,
                kC5 = 0x1.0e4020p-7f;

float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// madd(a, b, c) = a·b + c, fused or not.
template <bool Fma>
float madd(float a, float b, float c) {
  if constexpr (Fma) return std::fma(a, b, c);
  else return a * b + c;
}

// The 4/8-wide form (SSE2 without FMA, AVX2 with): k = 2^n built from z's bits, result k + k·j.
template <bool Fma>
float exp_sse_avx2(float x) {
  const float z = madd<Fma>(x, kInvLn2, kShift);
  const float n = z - kShift;
  const float b = Fma ? std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x)) : (x - n * kLn2Hi) - n * kLn2Lo;
  const uint32_t e = f_bits(z) << 23;
  const float k = bits_f(e + f_bits(1.0f));
  const float u = b * b;
  const float j = madd<Fma>(madd<Fma>(madd<Fma>(kC5, b, kC4), u, madd<Fma>(kC3, b, kC2)), u, kC1 * b);
  if (!(std::fabs(n) > 126.0f)) return madd<Fma>(k, j, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = bits_f(g + 0x7f000000u), s2 = bits_f(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return madd<Fma>(s2, j, s2) * s1;
}

// The 16-wide AVX-512 form: j includes the 1, result scalef(j, n) = j · 2^n.
float exp_avx512(float x) {
  const float z = std::fma(x, kInvLn2, kShift);
  const float n = z - kShift;
  const float b = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(kC5, b, kC4), u, std::fma(kC3, b, kC2)), u, std::fma(kC1, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));
}

float silu_libm(float x) { return x / (1.0f + std::exp(-x)); }

// ---- vector implementations (the same arithmetic as the scalar models, 8 or 16 lanes at once)

__attribute__((target("avx2,fma"))) __m256 exp8(__m256 x) {
  const __m256 r = _mm256_set1_ps(kShift);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(kInvLn2), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 c = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(kC5), b, _mm256_set1_ps(kC4)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(kC3), b, _mm256_set1_ps(kC2))),
      u, _mm256_mul_ps(_mm256_set1_ps(kC1), b));
  if (!_mm256_movemask_ps(c)) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                     _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 d = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 big = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
  const __m256 normal = _mm256_fmadd_ps(k, j, k);
  return _mm256_blendv_ps(_mm256_blendv_ps(normal, big, c), _mm256_mul_ps(s1, s1), d);
}

__attribute__((target("avx512f,avx512dq"))) __m512 exp16(__m512 x) {
  const __m512 r = _mm512_set1_ps(kShift);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(kInvLn2), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x));
  const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(kC5), b, _mm512_set1_ps(kC4)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(kC3), b, _mm512_set1_ps(kC2))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(kC1), b, _mm512_set1_ps(1.0f)));
  // Masked forms with an explicit source: the unmasked intrinsics trip GCC 12's
  // maybe-uninitialized warning on their internal undefined source.
  const __m512 res = _mm512_mask_scalef_ps(_mm512_setzero_ps(), 0xFFFF, j, n);
  if (!d) return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(d, res, alt);
}

__attribute__((target("avx2,fma"))) int64_t swiglu8(const float* x, const float* g, float* y, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 7 < n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 s = _mm256_div_ps(xv, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), xv))));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(g + i)));
  }
  return i;
}

__attribute__((target("avx512f,avx512dq"))) int64_t swiglu16(const float* x, const float* g, float* y, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 15 < n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    const __m512 s = _mm512_div_ps(xv, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), xv))));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(s, _mm512_loadu_ps(g + i)));
  }
  return i;
}

__attribute__((target("avx2,fma"))) int64_t exp_sum8(const float* x, float* y, int64_t n, float max, double& sum) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {
    const __m256 v = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
    _mm256_storeu_ps(y + i, v);
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    sum += static_cast<double>(_mm_cvtss_f32(s));
  }
  return i;
}

__attribute__((target("avx512f,avx512dq"))) int64_t exp_sum16(const float* x, float* y, int64_t n, float max, double& sum) {
  int64_t i = 0;
  for (; i + 15 < n; i += 16) {
    const __m512 v = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
    _mm512_storeu_ps(y + i, v);
    // _mm512_reduce_add_ps's tree: halves, quarters, then pairs.
    alignas(64) float t[16];
    _mm512_store_ps(t, v);
    for (int l = 0; l < 8; ++l) t[l] += t[l + 8];
    for (int l = 0; l < 4; ++l) t[l] += t[l + 4];
    sum += static_cast<double>((t[0] + t[2]) + (t[1] + t[3]));
  }
  return i;
}

// SSE2 form (no FMA), 4 lanes modelled one at a time: only used without AVX2, where speed is moot.
int64_t swiglu4(const float* x, const float* g, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4)
    for (int l = 0; l < 4; ++l) y[i + l] = x[i + l] / (1.0f + exp_sse_avx2<false>(0.0f - x[i + l])) * g[i + l];
  return i;
}

int64_t exp_sum4(const float* x, float* y, int64_t n, float max, double& sum) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4) {
    float v[4];
    for (int l = 0; l < 4; ++l) y[i + l] = v[l] = exp_sse_avx2<false>(x[i + l] - max);
    // ggml's SSE2 reduction: (v0 + v2) + (v1 + v3)
    sum += static_cast<double>((v[0] + v[2]) + (v[1] + v[3]));
  }
  return i;
}

__attribute__((target("avx2,fma,f16c"))) float dot_lanes8(const void* k, bool k16, const float* q, int32_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int32_t i = 0; i < n; i += 8) {
    const __m256 kv = k16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(k) + i)))
                          : _mm256_loadu_ps(static_cast<const float*>(k) + i);
    acc = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + i), acc);
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  return lane_tree(l, 8);
}

__attribute__((target("avx512f,fma,f16c"))) float dot_lanes16(const void* k, bool k16, const float* q, int32_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int32_t i = 0; i < n; i += 16) {
    const __m512 kv = k16 ? _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(k) + i)))
                          : _mm512_loadu_ps(static_cast<const float*>(k) + i);
    acc = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q + i), acc);
  }
  alignas(64) float l[16];
  _mm512_store_ps(l, acc);
  return lane_tree(l, 16);
}

__attribute__((target("avx2,fma"))) void axpy_fma8(float p, const float* v, float* acc, int32_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int32_t d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(acc + d)));
  for (; d < n; ++d) acc[d] = std::fma(p, v[d], acc[d]);
}

// The F16 accumulator steps one value at a time (the vector forms' tails and the SSE2 form).
void axpy_f16_1(float p, const uint16_t* v, uint16_t* acc, int32_t d0, int32_t n) {
  for (int32_t d = d0; d < n; ++d) acc[d] = fp32_to_fp16(std::fma(fp16_to_fp32(v[d]), p, fp16_to_fp32(acc[d])));
}
void scale_f16_1(float s, uint16_t* acc, int32_t d0, int32_t n) {
  for (int32_t d = d0; d < n; ++d) acc[d] = fp32_to_fp16(fp16_to_fp32(acc[d]) * s);
}

__attribute__((target("avx2,fma,f16c"))) void axpy_f16_8(float p, const uint16_t* v, uint16_t* acc, int32_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int32_t d = 0;
  for (; d + 8 <= n; d += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + d)));
    const __m256 av = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d),
                     _mm256_cvtps_ph(_mm256_fmadd_ps(vv, pv, av), _MM_FROUND_TO_NEAREST_INT));
  }
  axpy_f16_1(p, v, acc, d, n);
}

__attribute__((target("avx2,fma,f16c"))) void scale_f16_8(float s, uint16_t* acc, int32_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int32_t d = 0;
  for (; d + 8 <= n; d += 8) {
    const __m256 av = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_mul_ps(av, sv), _MM_FROUND_TO_NEAREST_INT));
  }
  scale_f16_1(s, acc, d, n);
}

}  // namespace

namespace {
std::atomic<int> g_requested_form{0};  // 0: the default; else an ExpForm's chunk width
}  // namespace

void request_exp_form(std::optional<ExpForm> f) {
  g_requested_form = f ? static_cast<int>(*f) : 0;
}

std::optional<ExpForm> exp_form_from_name(std::string_view name) {
  if (name == "avx512") return ExpForm::avx512;
  if (name == "avx2") return ExpForm::avx2;
  if (name == "sse2") return ExpForm::sse2;
  return std::nullopt;
}

ExpForm active_exp_form() {
  const int requested = g_requested_form.load(std::memory_order_relaxed);
  const cpu::Isa isa = cpu::active_isa();
  const bool has512 = isa >= cpu::Isa::avx512 && __builtin_cpu_supports("avx512dq");
  const bool has2 = isa >= cpu::Isa::avx2;
  if (requested == 16 && has512) return ExpForm::avx512;
  if (requested == 4 || !has2) return ExpForm::sse2;
  return ExpForm::avx2;
}

float expf_form(ExpForm f, float x) {
  switch (f) {
    case ExpForm::avx512: return exp_avx512(x);
    case ExpForm::avx2: return exp_sse_avx2<true>(x);
    case ExpForm::sse2: return exp_sse_avx2<false>(x);
  }
  return std::exp(x);
}

void swiglu(ExpForm f, const float* x, const float* g, float* y, int64_t n) {
  int64_t i = 0;
  switch (f) {
    case ExpForm::avx512: i = swiglu16(x, g, y, n); break;
    case ExpForm::avx2: i = swiglu8(x, g, y, n); break;
    case ExpForm::sse2: i = swiglu4(x, g, y, n); break;
  }
  for (; i < n; ++i) y[i] = silu_libm(x[i]) * g[i];
}

double exp_sum(ExpForm f, const float* x, float* y, int64_t n, float max) {
  double sum = 0.0;
  int64_t i = 0;
  switch (f) {
    case ExpForm::avx512: i = exp_sum16(x, y, n, max, sum); break;
    case ExpForm::avx2: i = exp_sum8(x, y, n, max, sum); break;
    case ExpForm::sse2: i = exp_sum4(x, y, n, max, sum); break;
  }
  for (; i < n; ++i) {
    y[i] = std::exp(x[i] - max);
    sum += static_cast<double>(y[i]);
  }
  return sum;
}

void swiglu(const float* x, const float* g, float* y, int64_t n) { swiglu(active_exp_form(), x, g, y, n); }

void silu(const float* x, float* y, int64_t n) {
  static thread_local std::vector<float> ones;
  if (static_cast<int64_t>(ones.size()) < n) ones.assign(static_cast<size_t>(n), 1.0f);
  swiglu(x, ones.data(), y, n);
}

double exp_sum(const float* x, float* y, int64_t n, float max) { return exp_sum(active_exp_form(), x, y, n, max); }

// The order in which ggml's tiled product (llamafile's tinyBLAS, used for the F16/F32 attention
// products) adds: W lanes (8 in AVX2 builds, 16 in AVX-512 ones), lane l accumulating elements
// l, l + W, ... with FMA, then a fixed tree over the lanes. Following it makes scores and outputs
// bit-identical to the oracle's, which matters: the F16 rounding of probabilities turns 1-ulp
// differences into 1e-4 ones, and those can flip near-tied expert choices further on.
int tiled_lanes() { return active_exp_form() == ExpForm::avx512 ? 16 : 8; }

// The lane tree: W = 8 as tinyBLAS's hsum(__m256); W = 16 as _mm512_reduce_add_ps.
float lane_tree(const float* l, int W) {
  float t[8];
  if (W == 16) {
    for (int i = 0; i < 8; ++i) t[i] = l[i + 8] + l[i];
    l = t;
  }
  const float h0 = l[4] + l[0], h1 = l[5] + l[1], h2 = l[6] + l[2], h3 = l[7] + l[3];
  return (h0 + h2) + (h1 + h3);
}

float dot_lanes_scalar(const void* k, bool k16, const float* q, int32_t n, int W) {
  float lanes[16] = {};
  for (int32_t i = 0; i < n; ++i) {
    const float kv = k16 ? fp16_to_fp32(static_cast<const uint16_t*>(k)[i]) : static_cast<const float*>(k)[i];
    lanes[i % W] = std::fma(kv, q[i], lanes[i % W]);
  }
  return lane_tree(lanes, W);
}

float dot_lanes(const void* k, bool k16, const float* q, int32_t n, int W) {
  const bool simd = active_exp_form() != ExpForm::sse2 && n % W == 0;
  if (simd && W == 8) return dot_lanes8(k, k16, q, n);
  if (simd && W == 16) return dot_lanes16(k, k16, q, n);
  return dot_lanes_scalar(k, k16, q, n, W);
}

// acc[d] = fma(p, v[d], acc[d]), the per-lane step of the V product.
void axpy_fma(float p, const float* v, float* acc, int32_t n) {
  if (active_exp_form() != ExpForm::sse2) return axpy_fma8(p, v, acc, n);
  for (int32_t d = 0; d < n; ++d) acc[d] = std::fma(p, v[d], acc[d]);
}

void axpy_f16(float p, const uint16_t* v, uint16_t* acc, int32_t n) {
  if (active_exp_form() != ExpForm::sse2) return axpy_f16_8(p, v, acc, n);
  axpy_f16_1(p, v, acc, 0, n);
}

void scale_f16(float s, uint16_t* acc, int32_t n) {
  if (active_exp_form() != ExpForm::sse2) return scale_f16_8(s, acc, n);
  scale_f16_1(s, acc, 0, n);
}


namespace {

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const void* p, int32_t i, bool f16) {
  return f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)))
             : _mm256_loadu_ps(static_cast<const float*>(p) + i);
}

__attribute__((target("avx2,fma,f16c"))) float dot_vecdot8(const void* w, const void* x, bool w16, int32_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int32_t np = n & ~31;
  for (int32_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load8(w, i + 8 * j, w16), load8(x, i + 8 * j, w16), acc[j]);
  acc[0] = _mm256_add_ps(acc[0], acc[2]);
  acc[1] = _mm256_add_ps(acc[1], acc[3]);
  acc[0] = _mm256_add_ps(acc[0], acc[1]);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  double sum = static_cast<double>(_mm_cvtss_f32(_mm_hadd_ps(t1, t1)));
  for (int32_t i = np; i < n; ++i) {
    const float a = w16 ? fp16_to_fp32(static_cast<const uint16_t*>(w)[i]) : static_cast<const float*>(w)[i];
    const float b = w16 ? fp16_to_fp32(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
    sum += static_cast<double>(a * b);
  }
  return static_cast<float>(sum);
}

__attribute__((target("fma"))) void rotate_pairs_fma(float* x0, float* x1, const float* cs, int32_t n_pairs) {
  for (int32_t j = 0; j < n_pairs; ++j) {
    const float a = x0[j], b = x1[j], c = cs[2 * j], s = cs[2 * j + 1];
    x0[j] = std::fma(a, c, -(b * s));
    x1[j] = std::fma(a, s, b * c);
  }
}

}  // namespace

float dot_vecdot(const void* w, const void* x, bool w16, int32_t n) {
  if (active_exp_form() == ExpForm::avx2) return dot_vecdot8(w, x, w16, n);
  // Other builds: the 4-accumulator structure with their widths is not modelled; a plain
  // double-accumulated dot is the closest portable choice.
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const float a = w16 ? fp16_to_fp32(static_cast<const uint16_t*>(w)[i]) : static_cast<const float*>(w)[i];
    const float b = w16 ? fp16_to_fp32(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
    sum += static_cast<double>(a * b);
  }
  return static_cast<float>(sum);
}

float vecdot_tree(const float* p) {
  // accumulators a = 0..3 of 8 lanes (slot 8a + l): (a0 + a2) + (a1 + a3), then the two 128-bit
  // halves added, then two horizontal adds.
  float z[8];
  for (int l = 0; l < 8; ++l) z[l] = (p[l] + p[16 + l]) + (p[8 + l] + p[24 + l]);
  return ((z[0] + z[4]) + (z[1] + z[5])) + ((z[2] + z[6]) + (z[3] + z[7]));
}

void rotate_pairs(float* x0, float* x1, const float* cs, int32_t n_pairs) {
  if (active_exp_form() != ExpForm::sse2) return rotate_pairs_fma(x0, x1, cs, n_pairs);
  for (int32_t j = 0; j < n_pairs; ++j) {
    const float a = x0[j], b = x1[j], c = cs[2 * j], s = cs[2 * j + 1];
    x0[j] = a * c - b * s;
    x1[j] = a * s + b * c;
  }
}

}  // namespace ferry::cpu_math
