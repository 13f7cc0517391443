// Gated DeltaNet: argument checks, ISA dispatch and head-parallel loops for the delta rule (the
// per-head loops live in gdn_core_impl.hpp), and the small elementwise parts of the layer.
#include "kernels/cpu/gdn.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gdn_internal.hpp"
#include "kernels/cpu/matmul.hpp"
#include "runtime/core/error.hpp"

namespace ferry::cpu {
namespace gdn_detail {

int64_t chunk_scratch_floats(int32_t head_dim) {
  // kt, w, d (3·C·S) + kkq (2C²) + tinv, tb, tk, dec (4C²) + cum (C); see ChunkScratch.
  const int64_t C = kGdnChunk;
  return 3 * C * head_dim + 6 * C * C + C;
}

}  // namespace gdn_detail

namespace {

using gdn_detail::HeadArgs;

struct IsaFns {
  void (*recurrent)(const HeadArgs&);
  void (*chunked)(const HeadArgs&, float*);
};

IsaFns isa_fns() {
  switch (active_isa()) {
    case Isa::avx512:
    case Isa::avx512vnni:
      return {gdn_detail::avx512::recurrent_head, gdn_detail::avx512::chunked_head};
    case Isa::avx2: return {gdn_detail::avx2::recurrent_head, gdn_detail::avx2::chunked_head};
    case Isa::scalar: break;
  }
  return {gdn_detail::scalar::recurrent_head, gdn_detail::scalar::chunked_head};
}

void check_inputs(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens, float* state,
                  float* out, int64_t ldo) {
  gdn_check_shape(shape);
  if (n_tokens < 0) fail(ErrorKind::invalid_arg, "gdn delta rule: n_tokens {} < 0", n_tokens);
  if (n_tokens == 0) return;
  if (!in.q || !in.k || !in.v || !in.g || !in.beta || !state || !out)
    fail(ErrorKind::invalid_arg, "gdn delta rule: null buffer");
  const int64_t kw = int64_t(shape.n_k_heads) * shape.head_dim;
  const int64_t vw = int64_t(shape.n_v_heads) * shape.head_dim;
  if (in.ldq < kw || in.ldk < kw || in.ldv < vw || ldo < vw)
    fail(ErrorKind::invalid_arg,
         "gdn delta rule: token strides (q {}, k {}, v {}, out {}) smaller than rows ({}, {})",
         in.ldq, in.ldk, in.ldv, ldo, kw, vw);
}

HeadArgs head_args(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens, float scale,
                   float* state, float* out, int64_t ldo, int32_t h) {
  const int32_t S = shape.head_dim;
  const int64_t kh = shape.key_head(h);
  return HeadArgs{in.q + kh * S, in.ldq, in.k + kh * S, in.ldk, in.v + int64_t(h) * S, in.ldv,
                  in.g + h, in.beta + h, shape.n_v_heads,
                  state + int64_t(h) * S * S, out + int64_t(h) * S, ldo,
                  n_tokens, S, scale};
}

}  // namespace

void gdn_check_shape(const GdnShape& s) {
  if (s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.head_dim <= 0)
    fail(ErrorKind::invalid_arg, "gdn: head counts and head_dim must be positive (k {}, v {}, dim {})",
         s.n_k_heads, s.n_v_heads, s.head_dim);
  if (s.n_v_heads % s.n_k_heads != 0)
    fail(ErrorKind::invalid_arg, "gdn: {} value heads is not a multiple of {} key heads",
         s.n_v_heads, s.n_k_heads);
  // Whole vectors of every ISA (16 floats for AVX-512); every released model uses 128.
  if (s.head_dim % 16 != 0 || s.head_dim > 1024)
    fail(ErrorKind::unsupported, "gdn: head_dim {} is not a multiple of 16 in [16, 1024]",
         s.head_dim);
}

void gdn_delta_rule_recurrent(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens,
                              float scale, float* state, float* out, int64_t ldo) {
  check_inputs(shape, in, n_tokens, state, out, ldo);
  if (n_tokens == 0) return;
  const auto fn = isa_fns().recurrent;
  tbb::parallel_for(tbb::blocked_range<int32_t>(0, shape.n_v_heads),
                    [&](const tbb::blocked_range<int32_t>& r) {
                      for (int32_t h = r.begin(); h < r.end(); ++h)
                        fn(head_args(shape, in, n_tokens, scale, state, out, ldo, h));
                    });
}

void gdn_delta_rule_chunked(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens,
                            float scale, float* state, float* out, int64_t ldo) {
  check_inputs(shape, in, n_tokens, state, out, ldo);
  if (n_tokens == 0) return;
  const auto fn = isa_fns().chunked;
  const int64_t scratch_floats = gdn_detail::chunk_scratch_floats(shape.head_dim);
  tbb::parallel_for(tbb::blocked_range<int32_t>(0, shape.n_v_heads),
                    [&](const tbb::blocked_range<int32_t>& r) {
                      std::vector<float> scratch(static_cast<size_t>(scratch_floats));
                      for (int32_t h = r.begin(); h < r.end(); ++h)
                        fn(head_args(shape, in, n_tokens, scale, state, out, ldo, h),
                           scratch.data());
                    });
}

void gdn_delta_rule(const GdnShape& shape, const GdnInputs& in, int64_t n_tokens, float scale,
                    float* state, float* out, int64_t ldo, GdnPrefill long_batches) {
  if (n_tokens >= kGdnChunkedMinTokens && long_batches == GdnPrefill::chunked)
    gdn_delta_rule_chunked(shape, in, n_tokens, scale, state, out, ldo);
  else
    gdn_delta_rule_recurrent(shape, in, n_tokens, scale, state, out, ldo);
}

namespace {

void silu_row(SiluRowFn silu, const float* x, float* y, int64_t n) {
  if (silu) return silu(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace

void gdn_conv_silu(const float* x, int64_t ldx, const float* w, int32_t kernel, float* state,
                   float* y, int64_t ldy, int64_t n_tokens, int64_t n_ch, SiluRowFn silu) {
  if (kernel < 1 || kernel > 16 || n_ch <= 0 || n_tokens < 0 || ldx < n_ch || ldy < n_ch)
    fail(ErrorKind::invalid_arg,
         "gdn conv: bad arguments (kernel {}, channels {}, tokens {}, ldx {}, ldy {})", kernel,
         n_ch, n_tokens, ldx, ldy);
  if (n_tokens == 0) return;
  if (!x || !w || !y || (kernel > 1 && !state)) fail(ErrorKind::invalid_arg, "gdn conv: null buffer");
  const int64_t tail = kernel - 1;
  constexpr int64_t kBlock = 256;  // channels per task; the transposed weights stay in L1

  auto run = [&](int64_t c0, int64_t c1) {
    const int64_t nc = c1 - c0;
    float wt[16][kBlock];  // (K, block) weights transposed so the channel loop is contiguous
    float acc[kBlock];
    for (int32_t k = 0; k < kernel; ++k)
      for (int64_t c = 0; c < nc; ++c) wt[k][c] = w[(c0 + c) * kernel + k];
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t c = 0; c < nc; ++c) acc[c] = 0.0f;
      for (int32_t k = 0; k < kernel; ++k) {
        const int64_t tau = t - tail + k;  // input time of tap k
        const float* in = tau >= 0 ? x + tau * ldx + c0 : state + (tail + tau) * n_ch + c0;
        for (int64_t c = 0; c < nc; ++c) acc[c] += wt[k][c] * in[c];  // product, then sum: as ggml
      }
      silu_row(silu, acc, y + t * ldy + c0, nc);
    }
    // The new tail is the last K−1 inputs of [state | x]; rows are written in increasing order
    // and read from a row ≥ the one written, so in place is safe.
    for (int64_t r = 0; r < tail; ++r) {
      const int64_t tau = n_tokens - tail + r;
      const float* src = tau >= 0 ? x + tau * ldx + c0 : state + (tail + tau) * n_ch + c0;
      std::copy(src, src + nc, state + r * n_ch + c0);
    }
  };

  const int64_t n_blocks = (n_ch + kBlock - 1) / kBlock;
  auto body = [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t b = r.begin(); b < r.end(); ++b)
      run(b * kBlock, std::min(n_ch, (b + 1) * kBlock));
  };
  if (n_tokens * n_ch < (int64_t(1) << 15))
    body(tbb::blocked_range<int64_t>(0, n_blocks));
  else
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_blocks), body);
}

void gdn_l2_norm_heads(float* x, int64_t ld, int64_t n_tokens, int32_t n_heads, int32_t dim,
                       float eps) {
  if (n_tokens < 0 || n_heads <= 0 || dim <= 0 || ld < int64_t(n_heads) * dim)
    fail(ErrorKind::invalid_arg, "gdn l2 norm: bad shape (tokens {}, heads {}, dim {}, ld {})",
         n_tokens, n_heads, dim, ld);
  // As llama.cpp builds it: rms_norm(x, eps/n) then a scale by 1/√n, i.e. x / √(‖x‖² + eps),
  // with each of those steps rounded as ggml rounds it (squares summed in double).
  const float eps_n = eps / static_cast<float>(dim);
  const float post = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + t * ld + int64_t(h) * dim;
      double sum = 0.0;
      for (int32_t i = 0; i < dim; ++i) sum += double(v[i] * v[i]);
      const float mean = static_cast<float>(sum / dim);
      const float scale = 1.0f / std::sqrt(mean + eps_n);
      for (int32_t i = 0; i < dim; ++i) v[i] = (v[i] * scale) * post;
    }
  }
}

void gdn_gated_rms_norm(const float* o, int64_t ldo, const float* z, int64_t ldz,
                        const float* weight, float* out, int64_t ldout, int64_t n_tokens,
                        int32_t n_heads, int32_t dim, float eps, SiluRowFn silu) {
  const int64_t width = int64_t(n_heads) * dim;
  if (n_tokens < 0 || n_heads <= 0 || dim <= 0 || ldo < width || ldz < width || ldout < width)
    fail(ErrorKind::invalid_arg,
         "gdn gated norm: bad shape (tokens {}, heads {}, dim {}, ld {}/{}/{})", n_tokens,
         n_heads, dim, ldo, ldz, ldout);
  std::vector<float> sz(static_cast<size_t>(dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < n_heads; ++h) {
      const float* orow = o + t * ldo + int64_t(h) * dim;
      const float* zrow = z + t * ldz + int64_t(h) * dim;
      float* dst = out + t * ldout + int64_t(h) * dim;
      silu_row(silu, zrow, sz.data(), dim);
      double sum = 0.0;
      for (int32_t i = 0; i < dim; ++i) sum += double(orow[i] * orow[i]);
      const float scale = 1.0f / std::sqrt(float(sum / dim) + eps);
      // Same float operation order as ggml's rms_norm → mul(weight) → mul(silu(z)).
      for (int32_t i = 0; i < dim; ++i) dst[i] = ((orow[i] * scale) * weight[i]) * sz[i];
    }
  }
}

void gdn_gates(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
               const float* dt_bias, const float* ssm_a, float* beta, float* g, int64_t ld_out,
               int64_t n_tokens, int32_t n_heads) {
  if (n_tokens < 0 || n_heads <= 0 || ldb < n_heads || lda < n_heads || ld_out < n_heads)
    fail(ErrorKind::invalid_arg, "gdn gates: bad shape (tokens {}, heads {}, ld {}/{}/{})",
         n_tokens, n_heads, ldb, lda, ld_out);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < n_heads; ++h) {
      beta[t * ld_out + h] = 1.0f / (1.0f + std::exp(-b_raw[t * ldb + h]));
      const float x = a_raw[t * lda + h] + dt_bias[h];
      const float softplus = x > 20.0f ? x : std::log(1.0f + std::exp(x));  // ggml's threshold
      g[t * ld_out + h] = softplus * ssm_a[h];
    }
  }
}

}  // namespace ferry::cpu
