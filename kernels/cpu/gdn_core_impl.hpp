// The per-head Gated DeltaNet loops, written once with GCC vector extensions and compiled once
// per ISA: the including file defines FERRY_GDN_NS (namespace) and FERRY_GDN_VW (floats per
// vector register), plus the register tile FERRY_GDN_MR × FERRY_GDN_NV of the small GEMMs.
// No header guard on purpose. Only C library calls (expf, memcpy) and code local to this
// namespace are used here: an out-of-line std:: template instantiated under AVX-512 flags could
// be picked by the linker for the baseline build too.
#include <math.h>

#include <utility>  // std::integer_sequence (compile time only)

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu/gdn_internal.hpp"

namespace ferry::cpu::gdn_detail::FERRY_GDN_NS {
namespace {

constexpr int VW = FERRY_GDN_VW;  // floats per vector
constexpr int MR = FERRY_GDN_MR;  // GEMM tile rows
constexpr int NV = FERRY_GDN_NV;  // GEMM tile width in vectors
constexpr int kChunk = 64;        // == kGdnChunk (gdn.hpp)

typedef float vf __attribute__((vector_size(VW * sizeof(float))));
typedef float vf_u __attribute__((vector_size(VW * sizeof(float)), aligned(alignof(float)),
                                  may_alias));

inline vf load(const float* p) { return *reinterpret_cast<const vf_u*>(p); }
inline void store(float* p, vf x) { *reinterpret_cast<vf_u*>(p) = x; }
inline vf splat(float x) {
#if FERRY_GDN_VW == 16 && defined(__AVX512F__)
  return _mm512_set1_ps(x);
#elif FERRY_GDN_VW == 8 && defined(__AVX__)
  return _mm256_set1_ps(x);
#else
  return vf{} + x;  // (0 + x is not folded to x because of −0; SSE2 only)
#endif
}

// a·b + c. Explicit because ISO C++ mode turns off FP contraction.
inline vf fmadd(vf a, vf b, vf c) {
#if FERRY_GDN_VW == 16 && defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif FERRY_GDN_VW == 8 && defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

// a·b + c rounded once on every path (the scalar path has no FMA instruction: fmaf per lane).
inline vf fma_exact(vf a, vf b, vf c) {
#if (FERRY_GDN_VW == 16 && defined(__AVX512F__)) || (FERRY_GDN_VW == 8 && defined(__FMA__))
  return fmadd(a, b, c);
#else
  vf r;
  for (int l = 0; l < VW; ++l) r[l] = fmaf(a[l], b[l], c[l]);
  return r;
#endif
}

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- Recurrent form ------------------------------------------------------------------------
// Token by token in the float order of llama.cpp's CPU gated_delta_net op (what it runs for
// prompts and decode alike), so that Ferry's recurrent results are its bits:
//   S ← S·e^{g}                          (one rounding per element)
//   u_j = Σ_i S[i][j]·k[i]               (ggml_vec_dot_f32, AVX2 build: 32 partial sums, element
//                                          i in slot i mod 32, FMAs in order; then slots l, l+16
//                                          and l+8, l+24 added, the two halves added, and the 8
//                                          lanes reduced as (z0+z4 + z1+z5) + (z2+z6 + z3+z7))
//   δ_j = (v_j − u_j)·β
//   S[i][j] ← fma(k[i], δ_j, S[i][j])
//   o_j = (Σ_i S[i][j]·q[i])·scale       (the same dot)
// The vectors here run over the value index j, so the slot structure over the key index i is the
// same on every ISA. One column block of NB vectors at a time (independent columns), kept in L1
// across tokens with its 32 × NB partial-sum vectors.
template <int NB>
void reduce_slots(const vf (&p)[32][NB], vf (&out)[NB]) {
  for (int b = 0; b < NB; ++b) {
    vf z[8];
    for (int l = 0; l < 8; ++l) z[l] = (p[l][b] + p[16 + l][b]) + (p[8 + l][b] + p[24 + l][b]);
    out[b] = ((z[0] + z[4]) + (z[1] + z[5])) + ((z[2] + z[6]) + (z[3] + z[7]));
  }
}

template <int NB>
void recurrent_block(const HeadArgs& a, int32_t j0, int64_t t0, int64_t t1) {
  const int32_t S = a.head_dim;
  float* const blk = a.state + j0;  // row i of the block at blk + i·S
  vf p[32][NB];
  for (int64_t t = t0; t < t1; ++t) {
    const float* k = a.k + t * a.ldk;
    const float* q = a.q + t * a.ldq;
    const float* v = a.v + t * a.ldv + j0;
    const vf eg = splat(expf(a.g[t * a.ldgb]));
    for (int s = 0; s < 32; ++s)
      for (int b = 0; b < NB; ++b) p[s][b] = vf{};
    for (int32_t i = 0; i < S; ++i) {
      float* row = blk + int64_t(i) * S;
      const vf ki = splat(k[i]);
      for (int b = 0; b < NB; ++b) {
        const vf st = load(row + b * VW) * eg;
        store(row + b * VW, st);
        p[i & 31][b] = fma_exact(st, ki, p[i & 31][b]);
      }
    }
    vf d[NB];
    reduce_slots<NB>(p, d);
    const vf beta = splat(a.beta[t * a.ldgb]);
    for (int b = 0; b < NB; ++b) d[b] = (load(v + b * VW) - d[b]) * beta;
    for (int s = 0; s < 32; ++s)
      for (int b = 0; b < NB; ++b) p[s][b] = vf{};
    for (int32_t i = 0; i < S; ++i) {
      float* row = blk + int64_t(i) * S;
      const vf ki = splat(k[i]), qi = splat(q[i]);
      for (int b = 0; b < NB; ++b) {
        const vf st = fma_exact(ki, d[b], load(row + b * VW));
        store(row + b * VW, st);
        p[i & 31][b] = fma_exact(st, qi, p[i & 31][b]);
      }
    }
    vf o[NB];
    reduce_slots<NB>(p, o);
    float* out = a.out + t * a.ldo + j0;
    const vf scale = splat(a.scale);
    for (int b = 0; b < NB; ++b) store(out + b * VW, o[b] * scale);
  }
}

// ---- Small GEMMs of the chunked form --------------------------------------------------------
// C[m][n] (+)= Σ_p A[m][p]·B[p][n] on one register tile of R rows × W vectors.
template <int R, int W>
void gemm_tile(int64_t P, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
               int64_t ldc, bool accumulate) {
  vf c[R][W];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) c[r][w] = accumulate ? load(C + r * ldc + w * VW) : vf{};
  for (int64_t p = 0; p < P; ++p) {
    vf b[W];
    for (int w = 0; w < W; ++w) b[w] = load(B + p * ldb + w * VW);
    for (int r = 0; r < R; ++r) {
      const vf ar = splat(A[r * lda + p]);
      for (int w = 0; w < W; ++w) c[r][w] = fmadd(ar, b[w], c[r][w]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) store(C + r * ldc + w * VW, c[r][w]);
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                        bool);

template <int R, int... Ws>
constexpr void fill_row(TileFn (&row)[NV], std::integer_sequence<int, Ws...>) {
  ((row[Ws] = &gemm_tile<R, Ws + 1>), ...);
}
template <int... Rs>
constexpr auto make_tiles(std::integer_sequence<int, Rs...>) {
  struct Table { TileFn fn[MR][NV]; } t{};
  (fill_row<Rs + 1>(t.fn[Rs], std::make_integer_sequence<int, NV>{}), ...);
  return t;
}
constexpr auto kTiles = make_tiles(std::make_integer_sequence<int, MR>{});

// C (M × N) (+)= A (M × P) · B (P × N); N a multiple of VW. With a_lower, A[m][p] = 0 for p > m
// (lower triangular), so a row tile stops at its last row's diagonal.
void gemm(int64_t M, int64_t N, int64_t P, const float* A, int64_t lda, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate, bool a_lower) {
  for (int64_t m0 = 0; m0 < M; m0 += MR) {
    const int r = int(min64(MR, M - m0));
    const int64_t pm = a_lower ? min64(P, m0 + r) : P;
    for (int64_t n0 = 0; n0 < N; n0 += NV * VW) {
      const int w = int(min64(NV, (N - n0) / VW));
      kTiles.fn[r - 1][w - 1](pm, A + m0 * lda, lda, B + n0, ldb, C + m0 * ldc + n0, ldc,
                               accumulate);
    }
  }
}

// ---- Chunked form ----------------------------------------------------------------------------
// Within a chunk of n ≤ 64 tokens starting from state S0, with c_t = Σ_{s≤t} g_s and Γ_t = e^{c_t}:
//   δ = T·diag(β)·V − T·diag(βΓ)·K·S0,   T = (I + L)⁻¹,   L[t][s] = β_t e^{c_t − c_s} k_t·k_s (s < t)
//   O = scale·(diag(Γ)·Q·S0 + (QKᵀ ⊙ e^{c_t − c_s}, s ≤ t)·δ)
//   S ← Γ_{n−1}·S0 + Σ_s e^{c_{n−1} − c_s} k_s δ_sᵀ
// The diagonal factors go into the small (n × n) matrices, so q, k and v are read in place from
// the caller's rows. Decay ratios are always formed as e^{difference} ≤ 1, never as quotients of
// Γ (which underflow for strong decay).
struct ChunkScratch {
  float* kt;    // (S, C): keys transposed, columns ≥ n zero; later the decayed keys of the update
  float* w;     // (C, S): T·diag(−βΓ)·K
  float* d;     // (C, S): δ
  float* kkq;   // (2C, C): K·Kᵀ (rows 0..n−1), then Q·Kᵀ masked, decayed, scaled (rows n..2n−1)
  float* tinv;  // (C, C): T
  float* tb;    // (C, C): T·diag(β)
  float* tk;    // (C, C): T·diag(−βΓ)
  float* dec;   // (C, C): e^{c_t − c_s} for s ≤ t
  float* cum;   // (C): c_t
};

ChunkScratch carve(float* p, int32_t S) {
  ChunkScratch s{};
  const int64_t cs = int64_t(kChunk) * S, cc = int64_t(kChunk) * kChunk;
  s.kt = p;    p += cs;
  s.w = p;     p += cs;
  s.d = p;     p += cs;
  s.kkq = p;   p += 2 * cc;
  s.tinv = p;  p += cc;
  s.tb = p;    p += cc;
  s.tk = p;    p += cc;
  s.dec = p;   p += cc;
  s.cum = p;
  return s;
}

void chunk(const HeadArgs& a, int64_t t0, int64_t n, const ChunkScratch& s) {
  const int32_t S = a.head_dim;
  const int64_t C = kChunk;
  const int64_t n_pad = (n + VW - 1) / VW * VW;  // GEMM widths over tokens are whole vectors
  float* const S0 = a.state;
  const float* q = a.q + t0 * a.ldq;  // (n, S) rows of this chunk, read in place
  const float* k = a.k + t0 * a.ldk;
  const float* v = a.v + t0 * a.ldv;

  float gamma[kChunk], beta[kChunk];
  for (int64_t t = 0; t < n; ++t) {
    s.cum[t] = (t ? s.cum[t - 1] : 0.0f) + a.g[(t0 + t) * a.ldgb];
    gamma[t] = expf(s.cum[t]);
    beta[t] = a.beta[(t0 + t) * a.ldgb];
    float* dr = s.dec + t * C;
    for (int64_t x = 0; x <= t; ++x) dr[x] = expf(s.cum[t] - s.cum[x]);
  }
  // Keys transposed (strided reads, contiguous writes), zero-padded to whole vectors.
  for (int32_t i = 0; i < S; ++i) {
    float* row = s.kt + i * C;
    for (int64_t t = 0; t < n; ++t) row[t] = k[t * a.ldk + i];
    for (int64_t t = n; t < n_pad; ++t) row[t] = 0.0f;
  }

  // K·Kᵀ and Q·Kᵀ: (n × S)·(S × n) each.
  gemm(n, n_pad, S, k, a.ldk, s.kt, C, s.kkq, C, false, false);
  gemm(n, n_pad, S, q, a.ldq, s.kt, C, s.kkq + n * C, C, false, false);

  // T = (I + L)⁻¹ by forward substitution: T[t] = e_t − Σ_{m<t} L[t][m] T[m]; then its two
  // column-scaled copies.
  for (int64_t t = 0; t < n; ++t) {
    float* tr = s.tinv + t * C;
    for (int64_t x = 0; x < n; ++x) tr[x] = 0.0f;
    const float* kk = s.kkq + t * C;
    const float* dr = s.dec + t * C;
    for (int64_t m = 0; m < t; ++m) {
      const float l = beta[t] * dr[m] * kk[m];
      const float* tm = s.tinv + m * C;
      for (int64_t x = 0; x <= m; ++x) tr[x] -= l * tm[x];
    }
    tr[t] = 1.0f;
    float* tb = s.tb + t * C;
    float* tk = s.tk + t * C;
    for (int64_t x = 0; x < n; ++x) {
      tb[x] = tr[x] * beta[x];
      tk[x] = tr[x] * (-beta[x] * gamma[x]);
    }
  }

  // δ = T·diag(β)·V + (T·diag(−βΓ)·K)·S0.
  gemm(n, S, n, s.tb, C, v, a.ldv, s.d, S, false, true);
  gemm(n, S, n, s.tk, C, k, a.ldk, s.w, S, false, true);
  gemm(n, S, S, s.w, S, S0, S, s.d, S, true, false);

  // O = scale·diag(Γ)·Q·S0 + P·δ with P = scale·(Q·Kᵀ masked to s ≤ t and decayed).
  float* out = a.out + t0 * a.ldo;
  gemm(n, S, S, q, a.ldq, S0, S, out, a.ldo, false, false);
  for (int64_t t = 0; t < n; ++t) {
    float* orow = out + t * a.ldo;
    const vf gv = splat(gamma[t] * a.scale);
    for (int32_t j = 0; j < S; j += VW) store(orow + j, load(orow + j) * gv);
    float* pr = s.kkq + (n + t) * C;
    const float* dr = s.dec + t * C;
    for (int64_t x = 0; x <= t; ++x) pr[x] *= dr[x] * a.scale;
    for (int64_t x = t + 1; x < n; ++x) pr[x] = 0.0f;
  }
  gemm(n, S, n, s.kkq + n * C, C, s.d, S, out, a.ldo, true, true);

  // S ← Γ_{n−1}·S0 + Kdᵀ·δ with Kd[s] = e^{c_{n−1} − c_s} k_s (kt reused, columns scaled).
  const float* decay_to_end = s.dec + (n - 1) * C;
  for (int32_t i = 0; i < S; ++i) {
    float* row = s.kt + i * C;
    for (int64_t t = 0; t < n; ++t) row[t] *= decay_to_end[t];
  }
  const vf g_end = splat(gamma[n - 1]);
  const int64_t s_floats = int64_t(S) * S;
  for (int64_t x = 0; x < s_floats; x += VW) store(S0 + x, load(S0 + x) * g_end);
  gemm(S, S, n, s.kt, C, s.d, S, S0, S, true, false);
}

}  // namespace

void recurrent_head(const HeadArgs& a) {
  if (a.n_tokens <= 0) return;
  constexpr int kBlock = VW == 16 ? 2 : 4;  // vectors per column block (32 floats at VW = 16)
  // Tokens in chunks, column blocks inside: a chunk's q/k/v rows stay in cache while every column
  // block passes over them (all tokens per block would re-read them from memory for long prompts).
  constexpr int64_t kTokens = 64;
  const int32_t nvec = a.head_dim / VW;
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokens) {
    const int64_t t1 = min64(a.n_tokens, t0 + kTokens);
    for (int32_t v0 = 0; v0 < nvec; v0 += kBlock) {
      const int32_t j0 = v0 * VW;
      switch (nvec - v0 < kBlock ? nvec - v0 : kBlock) {
        case 1: recurrent_block<1>(a, j0, t0, t1); break;
        case 2: recurrent_block<2>(a, j0, t0, t1); break;
        case 3: recurrent_block<3>(a, j0, t0, t1); break;
        default: recurrent_block<4>(a, j0, t0, t1); break;
      }
    }
  }
}

void chunked_head(const HeadArgs& a, float* scratch) {
  const ChunkScratch s = carve(scratch, a.head_dim);
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kChunk)
    chunk(a, t0, min64(kChunk, a.n_tokens - t0), s);
}

}  // namespace ferry::cpu::gdn_detail::FERRY_GDN_NS
