// Gated DeltaNet GPU kernels vs the CPU kernels of kernels/cpu/gdn.hpp (which are themselves tested
// against double-precision references): delta rule, conv+SiLU with state, gates, norms.
#include <algorithm>

#include "kernels/cpu/gdn.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/backend/gdn_ops.hpp"
#include "tests/gpu/gpu_test_util.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/deltanet.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

// In place, each head vector of dim floats in rows of stride ld (the padding is left as it is).
void l2_normalize(std::vector<float>& x, int64_t ld, int64_t n_heads, int64_t dim) {
  for (size_t row = 0; row < x.size(); row += ld)
    for (int64_t h = 0; h < n_heads; ++h) {
      float* p = x.data() + row + h * dim;
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(p[i]) * p[i];
      for (int64_t i = 0; i < dim; ++i) p[i] = static_cast<float>(p[i] / std::sqrt(ss));
    }
}

enum class Form { recurrent, chunked };

// NMSE bounds against the CPU kernels. The recurrent kernel does the CPU recurrence's operations
// in another summation order: ~1e-14. The chunked kernel against the CPU's chunked form: the same
// products in other orders (without FMA in the emulator, with it on a GPU): 1e-14..3e-14 seen;
// against the CPU recurrence the two forms' own difference adds to it: 4e-14..5e-13 seen (the CPU
// forms are both within 1e-9 of a double reference, tests/kernels/test_deltanet.cpp). Real bugs
// are far above: W's sign flipped gives 1e-3 on the output but only 8e-7 on the state, which a
// bound of 1e-6 would have let through; a dropped decay 0.4; a quotient of Γ inf under strong decay.
constexpr double kRecurrentBound = 1e-9;
constexpr double kChunkedBound = 1e-9;

struct RuleData {
  int hk, hv, S;
  int64_t n_total, ldk, ldv;  // q and k rows share the stride ldk
  std::vector<float> q, k, v, g, beta, state0;
};

// Random inputs with token strides wider than the heads (the model reads views into the conv
// output row). g in [g_lo, −0.01]: −5 makes the chunk's cumulative decay underflow in float.
RuleData make_rule_data(int hk, int hv, int S, int64_t n_total, float g_lo) {
  RuleData d{hk, hv, S, n_total, int64_t{hk} * S + 8, int64_t{hv} * S + 8, {}, {}, {}, {}, {}, {}};
  d.q = random_floats(n_total * d.ldk, 1);
  d.k = random_floats(n_total * d.ldk, 2);
  l2_normalize(d.q, d.ldk, hk, S);
  l2_normalize(d.k, d.ldk, hk, S);
  d.v = random_floats(n_total * d.ldv, 3, -2.f, 2.f);
  d.g = random_floats(n_total * hv, 4, g_lo, -0.01f);
  d.beta = random_floats(n_total * hv, 5, 0.05f, 0.95f);
  d.state0 = random_floats(int64_t{hv} * S * S, 6, -0.3f, 0.3f);
  return d;
}

// Device copies of a RuleData's inputs, and the GdnArgs of the call over tokens [t0, t0 + n).
struct RuleDev {
  DevBuf<float> q, k, v, g, beta;
  explicit RuleDev(const RuleData& d) : q(d.q), k(d.k), v(d.v), g(d.g), beta(d.beta) {}
  cuda::GdnArgs args(const RuleData& d, bool tiled, int64_t t0, int64_t n, float* state, float* out) const {
    cuda::GdnArgs a;
    a.n_k_heads = d.hk;
    a.n_v_heads = d.hv;
    a.head_dim = d.S;
    a.key_head_tiled = tiled;
    a.q = q.get() + t0 * d.ldk;
    a.ldq = d.ldk;
    a.k = k.get() + t0 * d.ldk;
    a.ldk = d.ldk;
    a.v = v.get() + t0 * d.ldv;
    a.ldv = d.ldv;
    a.g = g.get() + t0 * d.hv;
    a.beta = beta.get() + t0 * d.hv;
    a.state = state;
    a.out = out + t0 * d.hv * d.S;
    a.ldo = d.hv * d.S;
    a.n_tokens = n;
    a.scale = 1.f / std::sqrt(float(d.S));
    return a;
  }
};

// The CUDA kernel of `form` against the CPU kernel of the same form (and, for the chunked form,
// also against the CPU recurrence), over several calls: the state must carry over.
void run_rule(int hk, int hv, int S, bool tiled, std::vector<int64_t> calls, Form form = Form::recurrent,
              float g_lo = -0.6f) {
  int64_t n_total = 0;
  for (auto c : calls) n_total += c;
  const RuleData d = make_rule_data(hk, hv, S, n_total, g_lo);
  const cpu::GdnShape shape{hk, hv, S, tiled ? cpu::GdnKeyHeadMap::tiled : cpu::GdnKeyHeadMap::grouped};
  const float scale = 1.f / std::sqrt(float(S));
  auto state_cpu = d.state0, state_rec = d.state0;
  std::vector<float> out_cpu(n_total * hv * S), out_rec(out_cpu.size());

  const RuleDev dev(d);
  DevBuf<float> dstate(d.state0), dout(out_cpu.size());
  size_t scratch_bytes = 0;
  int64_t t0 = 0;
  for (int64_t n : calls) {
    cuda::GdnArgs a = dev.args(d, tiled, t0, n, dstate.get(), dout.get());
    scratch_bytes = std::max(scratch_bytes, cuda::gdn_chunked_scratch_bytes(a));
    t0 += n;
  }
  DevBuf<float> scratch(std::max<size_t>(scratch_bytes / sizeof(float), 1));
  t0 = 0;
  for (int64_t n : calls) {
    const cpu::GdnInputs in{d.q.data() + t0 * d.ldk, d.ldk, d.k.data() + t0 * d.ldk, d.ldk,
                            d.v.data() + t0 * d.ldv, d.ldv, d.g.data() + t0 * hv, d.beta.data() + t0 * hv};
    float* const o = out_cpu.data() + t0 * hv * S;
    const cuda::GdnArgs a = dev.args(d, tiled, t0, n, dstate.get(), dout.get());
    if (form == Form::recurrent) {
      cpu::gdn_delta_rule_recurrent(shape, in, n, scale, state_cpu.data(), o, hv * S);
      cuda::gdn_delta_rule(a, nullptr);
    } else {
      cpu::gdn_delta_rule_chunked(shape, in, n, scale, state_cpu.data(), o, hv * S);
      cpu::gdn_delta_rule_recurrent(shape, in, n, scale, state_rec.data(), out_rec.data() + t0 * hv * S, hv * S);
      cuda::gdn_delta_rule_chunked(a, scratch.get(), nullptr);
    }
    t0 += n;
  }
  std::string joined;
  for (auto c : calls) {
    if (!joined.empty()) joined += '+';
    joined += std::to_string(c);
  }
  const std::string shp = std::to_string(hk) + "/" + std::to_string(hv) + "h S=" + std::to_string(S) +
                          (tiled ? " tiled" : " grouped") + " tokens=" + joined +
                          (g_lo < -1.f ? " g>=" + std::to_string(int(g_lo)) : "");
  const auto out = dout.download(), state = dstate.download();
  if (form == Form::recurrent) {
    report("gdn_delta_rule out", shp, nmse(out_cpu, out), kRecurrentBound);
    report("gdn_delta_rule state", shp, nmse(state_cpu, state), kRecurrentBound);
  } else {
    report("gdn_delta_rule_chunked out", shp, nmse(out_cpu, out), kChunkedBound);
    report("gdn_delta_rule_chunked state", shp, nmse(state_cpu, state), kChunkedBound);
    report("gdn_delta_rule_chunked out vs recurrent", shp, nmse(out_rec, out), kChunkedBound);
    report("gdn_delta_rule_chunked state vs recurrent", shp, nmse(state_rec, state), kChunkedBound);
  }
}

TEST(GpuDeltaNet, DeltaRule) {
  FERRY_REQUIRE_GPU();
  run_rule(16, 32, 128, true, {1});          // qwen35 decode
  run_rule(16, 32, 128, true, {70, 1, 1});   // prefill then decode
  run_rule(2, 4, 32, false, {5, 64});        // qwen3next-style grouping
  run_rule(1, 2, 16, true, {3});
  run_rule(4, 4, 64, true, {130});
}

TEST(GpuDeltaNet, DeltaRuleChunked) {
  FERRY_REQUIRE_GPU();
  run_rule(16, 32, 128, true, {150}, Form::chunked);             // qwen35 shape, 2 full chunks + 22
  run_rule(2, 4, 64, true, {1, 63, 64, 65, 2}, Form::chunked);   // lengths around a chunk, state carried
  run_rule(2, 6, 32, false, {130, 7}, Form::chunked);            // qwen3next-style grouping
  run_rule(1, 2, 16, true, {70}, Form::chunked);
  run_rule(1, 1, 128, true, {64, 64}, Form::chunked);            // H_v = H_k
}

TEST(GpuDeltaNet, DeltaRuleChunkedStrongDecay) {
  FERRY_REQUIRE_GPU();
  // g down to −5: the cumulative decay within a chunk reaches e^{−300}, far below float's range, so
  // any ratio formed as a quotient of Γ would be 0/0.
  run_rule(2, 4, 64, false, {150}, Form::chunked, -5.f);
  run_rule(4, 8, 128, true, {100, 28}, Form::chunked, -5.f);
}

// A call longer than kGdnChunkedMaxTokens runs as several passes over one scratch of the pass
// size; the result is the CPU's chunked form over the whole call (its chunks fall on the same
// token boundaries, since the pass size is a multiple of 64).
TEST(GpuDeltaNet, DeltaRuleChunkedSeveralPasses) {
  FERRY_REQUIRE_GPU();
  const int64_t n = cuda::kGdnChunkedMaxTokens + 100;
  static_assert(cuda::kGdnChunkedMaxTokens % 64 == 0);
  run_rule(1, 1, 16, true, {n}, Form::chunked);
}

// The CUDA GdnOps (what the model calls) picks the recurrent kernel below
// cuda::kGdnChunkedMinTokens tokens and, from there, the form CudaOpsOptions::gdn_prefill names
// (chunked by default), with scratch charged to the device budget. Bit-identical results show
// which kernel ran (the two forms round differently).
TEST(GpuDeltaNet, BackendPicksTheConfiguredFormForLongBatches) {
  FERRY_REQUIRE_GPU();
  for (const cpu::GdnPrefill form : {cpu::GdnPrefill::chunked, cpu::GdnPrefill::recurrent}) {
    const bool chunked_form = form == cpu::GdnPrefill::chunked;
    SCOPED_TRACE(chunked_form ? "gdn_prefill = chunked" : "gdn_prefill = recurrent");
    DeviceOptions o;
    o.budget_bytes = 1ull << 30;
    const auto device = make_device(DeviceKind::cuda, o);
    CudaOpsOptions oo;
    oo.matmul_workspace_bytes = 0;
    oo.attention_workspace_bytes = 0;
    oo.use_cublas = false;
    oo.gdn_prefill = form;
    const auto ops = make_cuda_ops(*device, oo);
    const auto gdn = ops->make_gdn_ops();
    const int hk = 2, hv = 4, S = 32;
    const bool tiled = true;
    const int64_t n_short = cuda::kGdnChunkedMinTokens - 1,
                  n_long = cuda::kGdnChunkedMinTokens + 40;
    const RuleData d = make_rule_data(hk, hv, S, n_long, -0.6f);
    const RuleDev dev(d);
    const cpu::GdnShape shape{hk, hv, S, cpu::GdnKeyHeadMap::tiled};
    const float scale = 1.f / std::sqrt(float(S));
    const uint64_t used_before = device->memory().used_bytes;

    for (int64_t n : {n_short, n_long}) {
      // Through the backend.
      DevBuf<float> st_ops(d.state0), out_ops(n * hv * S);
      const cuda::GdnArgs a = dev.args(d, tiled, 0, n, st_ops.get(), out_ops.get());
      const cpu::GdnInputs in{a.q, a.ldq, a.k, a.ldk, a.v, a.ldv, a.g, a.beta};
      gdn->delta_rule(shape, in, n, scale, st_ops.get(), out_ops.get(), a.ldo);
      ops->sync();
      // Each kernel directly.
      DevBuf<float> st_rec(d.state0), out_rec(n * hv * S), st_chk(d.state0), out_chk(n * hv * S);
      DevBuf<float> scratch(cuda::gdn_chunked_scratch_bytes(a) / sizeof(float));
      cuda::gdn_delta_rule(dev.args(d, tiled, 0, n, st_rec.get(), out_rec.get()), nullptr);
      cuda::gdn_delta_rule_chunked(dev.args(d, tiled, 0, n, st_chk.get(), out_chk.get()),
                                   scratch.get(), nullptr);
      const auto out = out_ops.download(), rec = out_rec.download(), chk = out_chk.download();
      ASSERT_NE(rec, chk) << "the two forms should round differently, or this test shows nothing";
      const bool want_chunked = chunked_form && n >= cuda::kGdnChunkedMinTokens;
      EXPECT_EQ(out, want_chunked ? chk : rec) << n << " tokens";
      EXPECT_EQ(st_ops.download(), want_chunked ? st_chk.download() : st_rec.download())
          << n << " tokens";
      const uint64_t scratch_charged = device->memory().used_bytes - used_before;
      if (want_chunked)
        EXPECT_GE(scratch_charged, cuda::gdn_chunked_scratch_bytes(a))
            << "scratch not from the device budget";
      else
        EXPECT_EQ(scratch_charged, 0u) << "the recurrent path needs no scratch";
    }
  }
}

TEST(GpuDeltaNet, ConvSiluWithState) {
  FERRY_REQUIRE_GPU();
  for (int K : {4, 3}) {
    const int64_t n_ch = 1000, ldx = 1024;
    const auto w = random_floats(n_ch * K, 7);
    auto state_cpu = random_floats((K - 1) * n_ch, 8);
    const auto x = random_floats(40 * ldx, 9, -2.f, 2.f);
    std::vector<float> y_cpu(40 * n_ch);
    DevBuf<float> dx(x), dw(w), dstate(state_cpu), dy(y_cpu.size());
    int64_t t0 = 0;
    for (int64_t n : {1, 30, 9}) {
      cpu::gdn_conv_silu(x.data() + t0 * ldx, ldx, w.data(), K, state_cpu.data(), y_cpu.data() + t0 * n_ch, n_ch, n, n_ch);
      cuda::gdn_conv_silu(dx.get() + t0 * ldx, ldx, dw.get(), K, dstate.get(), dy.get() + t0 * n_ch, n_ch, n, n_ch, nullptr);
      t0 += n;
    }
    const std::string shp = "ch=1000 K=" + std::to_string(K) + " tokens=1+30+9";
    report("gdn_conv_silu out", shp, nmse(y_cpu, dy.download()), 1e-12);
    report("gdn_conv_silu state", shp, nmse(state_cpu, dstate.download()), 0);
  }
}

TEST(GpuDeltaNet, GatesAndNorms) {
  FERRY_REQUIRE_GPU();
  const int64_t n_tokens = 7;
  const int hv = 32, S = 128;
  const auto braw = random_floats(n_tokens * 40, 10, -4.f, 4.f), araw = random_floats(n_tokens * 40, 11, -4.f, 25.f);
  const auto dt = random_floats(hv, 12), ssm_a = random_floats(hv, 13, -3.f, -0.1f);
  std::vector<float> beta_c(n_tokens * hv), g_c(n_tokens * hv);
  cpu::gdn_gates(braw.data(), 40, araw.data(), 40, dt.data(), ssm_a.data(), beta_c.data(), g_c.data(), hv, n_tokens, hv);
  DevBuf<float> db(braw), da(araw), ddt(dt), dA(ssm_a), dbeta(beta_c.size()), dg(g_c.size());
  cuda::gdn_gates(db.get(), 40, da.get(), 40, ddt.get(), dA.get(), dbeta.get(), dg.get(), hv, n_tokens, hv, nullptr);
  report("gdn_gates beta", "7x32", nmse(beta_c, dbeta.download()), 1e-12);
  report("gdn_gates g", "7x32", nmse(g_c, dg.download()), 1e-12);

  // q|k inside a wider conv-output row (token stride 8192 like qwen35's qkv).
  const int64_t ld = 8192;
  auto x = random_floats(n_tokens * ld, 14, -2.f, 2.f);
  DevBuf<float> dx(x);
  cpu::gdn_l2_norm_heads(x.data(), ld, n_tokens, 16, S, 1e-6f);
  cuda::l2norm_heads(dx.get(), ld, n_tokens, 16, S, 1e-6f, nullptr);
  report("l2norm_heads", "7 tokens x 16h x 128, ld 8192", nmse(x, dx.download()), 1e-12);

  const auto o = random_floats(n_tokens * hv * S, 15, -2.f, 2.f), z = random_floats(n_tokens * 5000, 16, -3.f, 3.f);
  const auto w = random_floats(S, 17, 0.5f, 1.5f);
  std::vector<float> out_c(o.size());
  cpu::gdn_gated_rms_norm(o.data(), hv * S, z.data(), 5000, w.data(), out_c.data(), hv * S, n_tokens, hv, S, 1e-6f);
  DevBuf<float> dO(o), dz(z), dw(w), dout(o.size());
  cuda::rmsnorm_gated_heads(dO.get(), hv * S, dz.get(), 5000, dw.get(), dout.get(), hv * S, n_tokens, hv, S, 1e-6f, nullptr);
  report("rmsnorm_gated_heads", "7 tokens x 32h x 128", nmse(out_c, dout.download()), 1e-12);
}

#else
TEST(GpuDeltaNet, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
