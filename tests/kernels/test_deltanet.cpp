// Gated DeltaNet kernels: the recurrent and chunked delta rule against a double-precision
// recurrence written here from the formulas, against each other, across split calls, on every ISA
// path the CPU has; the conv with its rolling state, the norms and the gates against naive loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/gdn.hpp"
#include "kernels/cpu/matmul.hpp"
#include "runtime/core/error.hpp"

namespace ferry::cpu {
namespace {

size_t sz(int64_t x) { return static_cast<size_t>(x); }

double nmse(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return num / std::max(den, 1e-300);
}
double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  return nmse(a, std::vector<double>(ref.begin(), ref.end()));
}

// Random inputs of one delta-rule call, laid out as the model lays them out: q, k, v views into
// one conv output row per token (q | k | v), g and beta contiguous.
struct Problem {
  GdnShape shape;
  int64_t n_tokens = 0;
  int64_t row = 0;                // floats per token of the packed q|k|v rows
  std::vector<float> qkv;         // (n_tokens, row)
  std::vector<float> g, beta;     // (n_tokens, H_v)
  std::vector<float> state0;      // (H_v, S, S)

  GdnInputs inputs(int64_t t0 = 0) const {
    const int64_t kw = int64_t(shape.n_k_heads) * shape.head_dim;
    const float* base = qkv.data() + t0 * row;
    return GdnInputs{base, row, base + kw, row, base + 2 * kw, row,
                     g.data() + t0 * shape.n_v_heads, beta.data() + t0 * shape.n_v_heads};
  }
  float scale() const { return 1.0f / std::sqrt(float(shape.head_dim)); }
};

// decay: "mixed" (typical per-head decay rates, some heads nearly without decay), "none" (g = 0),
// "strong" (g ≈ −40 per token: the state is forgotten every token; e^{c} underflows in a chunk).
Problem make_problem(GdnShape shape, int64_t n_tokens, uint64_t seed,
                     const char* decay = "mixed") {
  Problem p;
  p.shape = shape;
  p.n_tokens = n_tokens;
  const int32_t S = shape.head_dim;
  const int64_t kw = int64_t(shape.n_k_heads) * S, vw = int64_t(shape.n_v_heads) * S;
  p.row = 2 * kw + vw + 8;  // padding: strides are not the row width
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  p.qkv.resize(sz(n_tokens * p.row));
  for (auto& x : p.qkv) x = normal(rng);
  for (int64_t t = 0; t < n_tokens; ++t)  // q and k are unit vectors per head, as after L2 norm
    for (int64_t h = 0; h < 2 * shape.n_k_heads; ++h) {
      float* v = p.qkv.data() + t * p.row + h * S;
      double s = 0;
      for (int32_t i = 0; i < S; ++i) s += double(v[i]) * v[i];
      for (int32_t i = 0; i < S; ++i) v[i] = float(v[i] / std::sqrt(s));
    }
  p.g.resize(sz(n_tokens * shape.n_v_heads));
  p.beta.resize(p.g.size());
  std::vector<float> rate(sz(shape.n_v_heads));
  for (int32_t h = 0; h < shape.n_v_heads; ++h)
    rate[sz(h)] = h % 4 == 3 ? 1e-3f : std::exp(4.0f * uni(rng) - 3.0f);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int32_t h = 0; h < shape.n_v_heads; ++h) {
      const size_t i = sz(t * shape.n_v_heads + h);
      const float x = normal(rng);
      p.beta[i] = 1.0f / (1.0f + std::exp(-x));
      const float sp = std::log1p(std::exp(normal(rng)));
      if (!std::strcmp(decay, "none")) p.g[i] = 0.0f;
      else if (!std::strcmp(decay, "strong")) p.g[i] = -40.0f * (0.5f + uni(rng));
      else p.g[i] = -rate[sz(h)] * sp;
    }
  p.state0.resize(sz(shape.state_floats()));
  for (auto& x : p.state0) x = 0.3f * normal(rng);
  return p;
}

// The rule token by token in double, with the key head map written out independently.
struct RefResult {
  std::vector<double> out;    // (n_tokens, H_v, S)
  std::vector<double> state;  // (H_v, S, S) key-major
};
RefResult reference(const Problem& p) {
  const GdnShape& sh = p.shape;
  const int32_t S = sh.head_dim, Hv = sh.n_v_heads, Hk = sh.n_k_heads;
  RefResult r;
  r.out.assign(sz(p.n_tokens * Hv * S), 0.0);
  r.state.assign(p.state0.begin(), p.state0.end());
  const GdnInputs in = p.inputs();
  const double scale = 1.0 / std::sqrt(double(S));
  std::vector<double> u(sz(S)), d(sz(S));
  for (int32_t h = 0; h < Hv; ++h) {
    const int32_t kh = sh.key_map == GdnKeyHeadMap::tiled ? h % Hk : h / (Hv / Hk);
    double* st = r.state.data() + int64_t(h) * S * S;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const float* q = in.q + t * in.ldq + int64_t(kh) * S;
      const float* k = in.k + t * in.ldk + int64_t(kh) * S;
      const float* v = in.v + t * in.ldv + int64_t(h) * S;
      const double eg = std::exp(double(in.g[t * Hv + h]));
      const double beta = in.beta[t * Hv + h];
      for (int64_t x = 0; x < int64_t(S) * S; ++x) st[x] *= eg;
      for (int32_t j = 0; j < S; ++j) {
        double s = 0;
        for (int32_t i = 0; i < S; ++i) s += st[i * S + j] * k[i];
        d[sz(j)] = beta * (v[j] - s);
      }
      for (int32_t i = 0; i < S; ++i)
        for (int32_t j = 0; j < S; ++j) st[i * S + j] += k[i] * d[sz(j)];
      for (int32_t j = 0; j < S; ++j) {
        double s = 0;
        for (int32_t i = 0; i < S; ++i) s += st[i * S + j] * q[i];
        r.out[sz((t * Hv + h) * S + j)] = scale * s;
      }
    }
  }
  return r;
}

enum class Form { recurrent, chunked };

struct RunResult {
  std::vector<float> out, state;
};
RunResult run(const Problem& p, Form form, std::vector<int64_t> splits = {}) {
  const int64_t vw = int64_t(p.shape.n_v_heads) * p.shape.head_dim;
  const int64_t ldo = vw + 16;  // output rows wider than the heads, as in a strided view
  RunResult r;
  r.state = p.state0;
  std::vector<float> out(sz(p.n_tokens * ldo), -7.0f);
  splits.push_back(p.n_tokens);
  int64_t t0 = 0;
  for (int64_t t1 : splits) {
    const auto fn = form == Form::recurrent ? gdn_delta_rule_recurrent : gdn_delta_rule_chunked;
    fn(p.shape, p.inputs(t0), t1 - t0, p.scale(), r.state.data(), out.data() + t0 * ldo, ldo);
    t0 = t1;
  }
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t x = vw; x < ldo; ++x)
      EXPECT_EQ(out[sz(t * ldo + x)], -7.0f) << "write past the heads at token " << t;
    r.out.insert(r.out.end(), out.begin() + t * ldo, out.begin() + t * ldo + vw);
  }
  return r;
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::scalar};
  if (detected_isa() >= Isa::avx2) v.push_back(Isa::avx2);
  if (detected_isa() >= Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { set_isa(saved_); }

 private:
  Isa saved_;
};

const GdnShape kSmall{2, 4, 128, GdnKeyHeadMap::tiled};

// Float rounding of either form gives NMSE ~1e-13 against the double recurrence; a wrong term
// (decay index, transposed state, missing β) gives ≥ 1e-3. The brief's F32 bound is 1e-5.
constexpr double kRefBound = 1e-9;
constexpr double kF32Bound = 1e-5;

TEST(DeltaNet, BothFormsMatchDoubleReferenceAtAllLengths) {
  IsaGuard guard;
  for (int64_t n : {1, 2, 15, 63, 64, 65, 128, 300}) {
    const Problem p = make_problem(kSmall, n, 1000 + n);
    const RefResult ref = reference(p);
    std::vector<RunResult> fma_results;  // AVX2 and AVX-512 do the same FMAs in the same order
    for (Isa isa : isas()) {
      set_isa(isa);
      SCOPED_TRACE(testing::Message() << "n=" << n << " isa=" << isa_name(isa));
      const RunResult rec = run(p, Form::recurrent);
      const RunResult chk = run(p, Form::chunked);
      if (isa != Isa::scalar) {
        fma_results.push_back(rec);
        fma_results.push_back(chk);
      }
      if (fma_results.size() == 4) {
        EXPECT_EQ(fma_results[2].out, fma_results[0].out);
        EXPECT_EQ(fma_results[2].state, fma_results[0].state);
        EXPECT_EQ(fma_results[3].out, fma_results[1].out);
        EXPECT_EQ(fma_results[3].state, fma_results[1].state);
      }
      EXPECT_LT(nmse(rec.out, ref.out), kRefBound);
      EXPECT_LT(nmse(rec.state, ref.state), kRefBound);
      EXPECT_LT(nmse(chk.out, ref.out), kRefBound);
      EXPECT_LT(nmse(chk.state, ref.state), kRefBound);
      EXPECT_LT(nmse(chk.out, rec.out), kF32Bound);
      EXPECT_LT(nmse(chk.state, rec.state), kF32Bound);
    }
  }
}

TEST(DeltaNet, RealQwen35Dimensions) {
  // 16 key heads, 32 value heads, head 128: value head h reads key head h mod 16.
  const Problem p = make_problem({16, 32, 128, GdnKeyHeadMap::tiled}, 65, 7);
  const RefResult ref = reference(p);
  const RunResult rec = run(p, Form::recurrent);
  const RunResult chk = run(p, Form::chunked);
  EXPECT_LT(nmse(rec.out, ref.out), kRefBound);
  EXPECT_LT(nmse(chk.out, ref.out), kRefBound);
  EXPECT_LT(nmse(chk.state, ref.state), kRefBound);
}

TEST(DeltaNet, GroupedKeyHeadsAsQwen3Next) {
  IsaGuard guard;
  const GdnShape grouped{2, 6, 64, GdnKeyHeadMap::grouped};
  const Problem p = make_problem(grouped, 70, 21);
  const RefResult ref = reference(p);
  for (Isa isa : isas()) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    EXPECT_LT(nmse(run(p, Form::recurrent).out, ref.out), kRefBound);
    EXPECT_LT(nmse(run(p, Form::chunked).out, ref.out), kRefBound);
  }
  // The map matters: the same data read with the tiled map is a different computation.
  Problem tiled = p;
  tiled.shape.key_map = GdnKeyHeadMap::tiled;
  EXPECT_GT(nmse(run(tiled, Form::recurrent).out, ref.out), 1e-3);
}

TEST(DeltaNet, DecayExtremes) {
  IsaGuard guard;
  for (const char* decay : {"none", "strong"}) {
    const Problem p = make_problem({1, 2, 32, GdnKeyHeadMap::tiled}, 150, 5, decay);
    const RefResult ref = reference(p);
    for (Isa isa : isas()) {
      set_isa(isa);
      SCOPED_TRACE(testing::Message() << decay << " " << isa_name(isa));
      const RunResult rec = run(p, Form::recurrent);
      const RunResult chk = run(p, Form::chunked);
      EXPECT_LT(nmse(rec.out, ref.out), kRefBound);
      EXPECT_LT(nmse(chk.out, ref.out), kRefBound);
      EXPECT_LT(nmse(chk.state, ref.state), kRefBound);
    }
  }
}

TEST(DeltaNet, StateCarriedAcrossCallsEqualsOneCall) {
  IsaGuard guard;
  const Problem p = make_problem(kSmall, 300, 99);
  for (Isa isa : isas()) {
    set_isa(isa);
    const RunResult rec_once = run(p, Form::recurrent);
    const RunResult chk_once = run(p, Form::chunked);
    for (const std::vector<int64_t>& splits :
         std::vector<std::vector<int64_t>>{{1}, {64}, {37}, {100, 200}, {63, 64, 65, 299}}) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " first split " << splits[0]);
      // The recurrent form does the same float operations whatever the split: bit-identical.
      const RunResult rec = run(p, Form::recurrent, splits);
      EXPECT_EQ(rec.out, rec_once.out);
      EXPECT_EQ(rec.state, rec_once.state);
      // The chunked form's chunks move with the split: equal to rounding.
      const RunResult chk = run(p, Form::chunked, splits);
      EXPECT_LT(nmse(chk.out, chk_once.out), kRefBound);
      EXPECT_LT(nmse(chk.state, chk_once.state), kRefBound);
    }
    // Prefill chunked, then decode token by token (the model's pattern).
    std::vector<int64_t> decode_splits{200};
    for (int64_t t = 201; t < 300; ++t) decode_splits.push_back(t);
    RunResult mixed;
    mixed.state = p.state0;
    const int64_t vw = int64_t(kSmall.n_v_heads) * kSmall.head_dim;
    mixed.out.assign(sz(300 * vw), 0.0f);
    gdn_delta_rule(p.shape, p.inputs(0), 200, p.scale(), mixed.state.data(), mixed.out.data(), vw,
                   GdnPrefill::chunked);
    for (int64_t t = 200; t < 300; ++t)
      gdn_delta_rule(p.shape, p.inputs(t), 1, p.scale(), mixed.state.data(),
                     mixed.out.data() + t * vw, vw, GdnPrefill::chunked);
    EXPECT_LT(nmse(mixed.out, rec_once.out), kF32Bound);
    EXPECT_LT(nmse(mixed.state, rec_once.state), kF32Bound);
  }
}

TEST(DeltaNet, RejectsBadShapes) {
  const Problem p = make_problem(kSmall, 4, 3);
  std::vector<float> state = p.state0, out(sz(4 * 4 * 128));
  auto call = [&](GdnShape s, int64_t ldo) {
    gdn_delta_rule(s, p.inputs(), 4, 0.1f, state.data(), out.data(), ldo, GdnPrefill::recurrent);
  };
  EXPECT_THROW(call({2, 5, 128, GdnKeyHeadMap::tiled}, 5 * 128), Error);  // 5 % 2 != 0
  EXPECT_THROW(call({2, 4, 24, GdnKeyHeadMap::tiled}, 4 * 24), Error);    // 24 % 16 != 0
  EXPECT_THROW(call({0, 4, 128, GdnKeyHeadMap::tiled}, 4 * 128), Error);
  EXPECT_THROW(call(kSmall, 100), Error);  // output stride narrower than the heads
}

// ---- conv ------------------------------------------------------------------------------------

std::vector<double> conv_reference(const std::vector<float>& x, int64_t n_tokens, int64_t n_ch,
                                   const std::vector<float>& w, int32_t K,
                                   const std::vector<float>& state0) {
  std::vector<double> y(sz(n_tokens * n_ch));
  for (int64_t c = 0; c < n_ch; ++c) {
    // The ggml_ssm_conv input row of channel c: [state (K−1) | x (n_tokens)].
    std::vector<double> row;
    for (int32_t r = 0; r < K - 1; ++r) row.push_back(state0[sz(r * n_ch + c)]);
    for (int64_t t = 0; t < n_tokens; ++t) row.push_back(x[sz(t * n_ch + c)]);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int32_t k = 0; k < K; ++k) s += row[sz(t + k)] * w[sz(c * K + k)];
      y[sz(t * n_ch + c)] = s / (1.0 + std::exp(-s));
    }
  }
  return y;
}

TEST(DeltaNetConv, MatchesReferenceAndCarriesState) {
  const int64_t n_ch = 600, n_tokens = 23;  // channels not a multiple of the kernel's block
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int32_t K : {4, 2, 1}) {
    SCOPED_TRACE(testing::Message() << "K=" << K);
    std::vector<float> x(sz(n_tokens * n_ch)), w(sz(n_ch * K)),
        state0(sz((K - 1) * n_ch));
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = 0.5f * normal(rng);
    for (auto& v : state0) v = normal(rng);
    const std::vector<double> ref = conv_reference(x, n_tokens, n_ch, w, K, state0);

    for (const std::vector<int64_t>& parts :
         std::vector<std::vector<int64_t>>{{23}, {1, 1, 1, 20}, {2, 7, 14}, {10, 13}}) {
      std::vector<float> state = state0, y(sz(n_tokens * n_ch));
      int64_t t0 = 0;
      for (int64_t len : parts) {
        gdn_conv_silu(x.data() + t0 * n_ch, n_ch, w.data(), K, state.data(),
                      y.data() + t0 * n_ch, n_ch, len, n_ch);
        t0 += len;
      }
      EXPECT_LT(nmse(y, ref), 1e-12);
      // The state ends as the last K−1 inputs.
      for (int32_t r = 0; r < K - 1; ++r)
        for (int64_t c = 0; c < n_ch; ++c)
          ASSERT_EQ(state[sz(r * n_ch + c)], x[sz((n_tokens - (K - 1) + r) * n_ch + c)]);
    }
  }
}

TEST(DeltaNetConv, StridedRowsAndParallelPath) {
  // Large enough for the parallel path; x is a view into wider rows (the qkv part of a
  // projection output), y into wider rows too.
  const int64_t n_ch = 1030, n_tokens = 70, ldx = 1100, ldy = 1040;
  const int32_t K = 4;
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xw(sz(n_tokens * ldx)), w(sz(n_ch * K)), state0(sz(3 * n_ch));
  for (auto& v : xw) v = normal(rng);
  for (auto& v : w) v = 0.5f * normal(rng);
  for (auto& v : state0) v = normal(rng);
  std::vector<float> x(sz(n_tokens * n_ch));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t c = 0; c < n_ch; ++c) x[sz(t * n_ch + c)] = xw[sz(t * ldx + c)];
  const std::vector<double> ref = conv_reference(x, n_tokens, n_ch, w, K, state0);
  std::vector<float> state = state0, yw(sz(n_tokens * ldy), 5.0f), y;
  gdn_conv_silu(xw.data(), ldx, w.data(), K, state.data(), yw.data(), ldy, n_tokens, n_ch);
  for (int64_t t = 0; t < n_tokens; ++t) {
    y.insert(y.end(), yw.begin() + t * ldy, yw.begin() + t * ldy + n_ch);
    for (int64_t c = n_ch; c < ldy; ++c) ASSERT_EQ(yw[sz(t * ldy + c)], 5.0f);
  }
  EXPECT_LT(nmse(y, ref), 1e-12);
}

// ---- norms and gates --------------------------------------------------------------------------

TEST(DeltaNetNorms, L2NormPerHead) {
  const int64_t n_tokens = 5, ld = 3 * 32 + 7;
  const int32_t heads = 3, dim = 32;
  const float eps = 1e-6f;
  std::mt19937_64 rng(13);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(sz(n_tokens * ld));
  for (auto& v : x) v = normal(rng);
  for (int32_t i = 0; i < dim; ++i) {
    x[sz(1 * ld + 32 + i)] = 0.0f;          // zero vector: stays zero
    x[sz(2 * ld + 64 + i)] = i ? 0.0f : 1e-8f;  // ‖x‖² ≪ eps: divided by √eps, not by its norm
  }
  std::vector<float> y = x;
  gdn_l2_norm_heads(y.data(), ld, n_tokens, heads, dim, eps);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < heads; ++h) {
      const float* a = x.data() + t * ld + h * dim;
      double s = 0;
      for (int32_t i = 0; i < dim; ++i) s += double(a[i]) * a[i];
      const double scale = 1.0 / std::sqrt(s + double(eps));  // llama.cpp's form: x / √(‖x‖² + eps)
      for (int32_t i = 0; i < dim; ++i)
        ASSERT_NEAR(y[sz(t * ld + h * dim + i)], a[i] * scale, 1e-6 * (1 + std::abs(a[i] * scale)));
    }
    for (int64_t c = heads * dim; c < ld; ++c) ASSERT_EQ(y[sz(t * ld + c)], x[sz(t * ld + c)]);
  }
  EXPECT_NEAR(y[sz(2 * ld + 64)], 1e-8 / std::sqrt(1e-16 + double(eps)), 1e-6 * 1e-5);
}

TEST(DeltaNetNorms, GatedRmsNormMatchesNaive) {
  const int64_t n_tokens = 4;
  const int32_t heads = 3, dim = 64;
  const int64_t ldo = heads * dim + 3, ldz = heads * dim + 5;
  const float eps = 1e-6f;
  std::mt19937_64 rng(14);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> o(sz(n_tokens * ldo)), z(sz(n_tokens * ldz)), w(sz(dim));
  for (auto& v : o) v = 0.2f * normal(rng);
  for (auto& v : z) v = 2.0f * normal(rng);
  for (auto& v : w) v = 1.0f + 0.3f * normal(rng);
  std::vector<float> out(sz(n_tokens * heads * dim));
  gdn_gated_rms_norm(o.data(), ldo, z.data(), ldz, w.data(), out.data(), heads * dim, n_tokens,
                     heads, dim, eps);
  std::vector<double> ref;
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int32_t h = 0; h < heads; ++h) {
      const float* a = o.data() + t * ldo + h * dim;
      const float* g = z.data() + t * ldz + h * dim;
      double ms = 0;
      for (int32_t i = 0; i < dim; ++i) ms += double(a[i]) * a[i] / dim;
      for (int32_t i = 0; i < dim; ++i)
        ref.push_back(a[i] / std::sqrt(ms + eps) * w[sz(i)] * g[i] / (1 + std::exp(-double(g[i]))));
    }
  EXPECT_LT(nmse(out, ref), 1e-12);
  // In place (out aliasing o) gives the same values.
  std::vector<float> inplace(o);
  gdn_gated_rms_norm(inplace.data(), ldo, z.data(), ldz, w.data(), inplace.data(), ldo, n_tokens,
                     heads, dim, eps);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int32_t c = 0; c < heads * dim; ++c)
      ASSERT_EQ(inplace[sz(t * ldo + c)], out[sz(t * heads * dim + c)]);
}

TEST(DeltaNetGates, BetaAndDecay) {
  const int64_t n_tokens = 6;
  const int32_t heads = 5;
  std::mt19937_64 rng(15);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> b(sz(n_tokens * 8)), a(sz(n_tokens * 9)), dt(sz(heads)),
      ssm_a(sz(heads));
  for (auto& v : b) v = normal(rng);
  for (auto& v : a) v = normal(rng);
  for (auto& v : dt) v = normal(rng);
  for (auto& v : ssm_a) v = -std::exp(0.5f * normal(rng));
  a[0] = 30.0f;  // the softplus linear branch
  const int64_t ld_out = heads + 2;
  std::vector<float> beta(sz(n_tokens * ld_out), 9.0f), g(beta.size(), 9.0f);
  gdn_gates(b.data(), 8, a.data(), 9, dt.data(), ssm_a.data(), beta.data(), g.data(), ld_out,
            n_tokens, heads);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int32_t h = 0; h < ld_out; ++h) {
      if (h >= heads) {  // the padding of each output row is untouched
        ASSERT_EQ(beta[sz(t * ld_out + h)], 9.0f);
        ASSERT_EQ(g[sz(t * ld_out + h)], 9.0f);
        continue;
      }
      const double xb = b[sz(t * 8 + h)], xa = a[sz(t * 9 + h)] + double(dt[sz(h)]);
      const double want_beta = 1 / (1 + std::exp(-xb));
      const double want_g = ssm_a[sz(h)] * std::log1p(std::exp(xa));
      ASSERT_NEAR(beta[sz(t * ld_out + h)], want_beta, 1e-6);
      ASSERT_NEAR(g[sz(t * ld_out + h)], want_g, 1e-5 * (1 + std::abs(want_g)));
      ASSERT_LT(g[sz(t * ld_out + h)], 0.0f);
    }
}

}  // namespace
}  // namespace ferry::cpu
