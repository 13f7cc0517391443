// Gated DeltaNet GPU kernels vs the CPU kernels of kernels/cpu/gdn.hpp (which are themselves tested
// against double-precision references): delta rule, conv+SiLU with state, gates, norms.
#include "tests/gpu/gpu_test_util.hpp"

#include "kernels/cpu/gdn.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/deltanet.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

void l2_normalize(std::vector<float>& x, int64_t dim) {
  for (size_t o = 0; o < x.size(); o += dim) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[o + i]) * x[o + i];
    for (int64_t i = 0; i < dim; ++i) x[o + i] = static_cast<float>(x[o + i] / std::sqrt(ss));
  }
}

void run_rule(int hk, int hv, int S, bool tiled, std::vector<int64_t> chunks) {
  int64_t n_total = 0;
  for (auto c : chunks) n_total += c;
  auto q = random_floats(n_total * hk * S, 1), k = random_floats(n_total * hk * S, 2);
  l2_normalize(q, S);
  l2_normalize(k, S);
  const auto v = random_floats(n_total * hv * S, 3, -2.f, 2.f);
  const auto g = random_floats(n_total * hv, 4, -0.6f, -0.01f);
  const auto beta = random_floats(n_total * hv, 5, 0.05f, 0.95f);
  auto state_cpu = random_floats(int64_t{hv} * S * S, 6, -0.3f, 0.3f);
  std::vector<float> out_cpu(n_total * hv * S);
  cpu::GdnShape shape{hk, hv, S, tiled ? cpu::GdnKeyHeadMap::tiled : cpu::GdnKeyHeadMap::grouped};
  const float scale = 1.f / std::sqrt(float(S));

  DevBuf<float> dq(q), dk(k), dv(v), dg(g), db(beta), dstate(state_cpu), dout(out_cpu.size());
  int64_t t0 = 0;
  for (int64_t n : chunks) {  // several calls: the state must carry over
    cpu::GdnInputs in{q.data() + t0 * hk * S, hk * S, k.data() + t0 * hk * S, hk * S, v.data() + t0 * hv * S,
                      hv * S, g.data() + t0 * hv, beta.data() + t0 * hv};
    cpu::gdn_delta_rule_recurrent(shape, in, n, scale, state_cpu.data(), out_cpu.data() + t0 * hv * S, hv * S);
    cuda::GdnArgs a;
    a.n_k_heads = hk;
    a.n_v_heads = hv;
    a.head_dim = S;
    a.key_head_tiled = tiled;
    a.q = dq.get() + t0 * hk * S;
    a.ldq = hk * S;
    a.k = dk.get() + t0 * hk * S;
    a.ldk = hk * S;
    a.v = dv.get() + t0 * hv * S;
    a.ldv = hv * S;
    a.g = dg.get() + t0 * hv;
    a.beta = db.get() + t0 * hv;
    a.state = dstate.get();
    a.out = dout.get() + t0 * hv * S;
    a.ldo = hv * S;
    a.n_tokens = n;
    a.scale = scale;
    cuda::gdn_delta_rule(a, nullptr);
    t0 += n;
  }
  std::string calls;
  for (auto c : chunks) {
    if (!calls.empty()) calls += '+';
    calls += std::to_string(c);
  }
  const std::string shp = std::to_string(hk) + "/" + std::to_string(hv) + "h S=" + std::to_string(S) +
                          (tiled ? " tiled" : " grouped") + " tokens=" + calls;
  report("gdn_delta_rule out", shp, nmse(out_cpu, dout.download()), 1e-9);
  report("gdn_delta_rule state", shp, nmse(state_cpu, dstate.download()), 1e-9);
}

TEST(GpuDeltaNet, DeltaRule) {
  FERRY_REQUIRE_GPU();
  run_rule(16, 32, 128, true, {1});          // qwen35 decode
  run_rule(16, 32, 128, true, {70, 1, 1});   // prefill then decode
  run_rule(2, 4, 32, false, {5, 64});        // qwen3next-style grouping
  run_rule(1, 2, 16, true, {3});
  run_rule(4, 4, 64, true, {130});
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
