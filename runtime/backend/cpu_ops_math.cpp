#include "runtime/backend/cpu_ops_math.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matmul.hpp"

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

}  // namespace

ExpForm active_exp_form() {
  static const int requested = [] {
    const char* env = std::getenv("FERRY_EXP_FORM");
    if (!env) return 0;
    if (!std::strcmp(env, "avx512")) return 16;
    if (!std::strcmp(env, "avx2")) return 8;
    if (!std::strcmp(env, "sse2")) return 4;
    return 0;
  }();
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

double exp_sum(const float* x, float* y, int64_t n, float max) { return exp_sum(active_exp_form(), x, y, n, max); }

}  // namespace ferry::cpu_math
