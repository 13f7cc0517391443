// The fused decode ops of CudaOps (Ops::matmul_multi, matmul_multi_route, residual_norm;
// kernels/cuda/fused.cu) and of its DeltaNet ops (GdnOps::conv_l2_gates, kernels/cuda/deltanet_step.cu;
// GdnOps::delta_rule_gated_norm, kernels/cuda/deltanet.cu)
// on random data (SwiGLU pairs included): against CpuOps (which runs the defining op sequence, ggml's order) within the op
// table's bounds, bit for bit against the unfused CUDA sequence they replace (the base class's
// Ops:: composition on the same CudaOps), and in the launches they promise.
#include "tests/gpu/gpu_test_util.hpp"

#include <cmath>
#include <cstring>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/gdn_ops.hpp"
#include "tests/gpu/backend_pair.hpp"

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Matrix {
  GgmlType type;
  int64_t rows;
  bool swiglu_pair = false;  // with an up matrix of the same shape: y = silu(w·x) ⊙ (up·x)
};

// One input vector, several weights (types mixed as in a decode layer: quantized projections,
// F32 routers and one-row gate vectors); n = 1 is the fused path, n = 3 the per-target fallback.
// Each call has backends of its own: resident() keeps its copy per host address and view for the
// Ops' lifetime, and this call's host matrices are freed on return — a later call's matrix of the
// same type and shape at a reused address would get the stale copy.
void check_multi(const std::vector<Matrix>& ms, int64_t n, size_t want_launches) {
  Backends b;
  const int64_t cols = 512;
  std::vector<std::vector<uint8_t>> host;
  host.reserve(2 * ms.size());
  std::vector<WeightView> hw, dw, hup(ms.size()), dup(ms.size());
  std::string shape;
  for (size_t i = 0; i < ms.size(); ++i) {
    const auto seed = static_cast<uint32_t>(17 + 3 * i);
    host.push_back(quantize_rows(ms[i].type, random_floats(ms[i].rows * cols, seed), ms[i].rows, cols, seed));
    hw.push_back({host.back().data(), ms[i].type, ms[i].rows, cols});
    dw.push_back(b.gpu->resident(hw.back()));
    if (ms[i].swiglu_pair) {
      host.push_back(quantize_rows(ms[i].type, random_floats(ms[i].rows * cols, seed + 1), ms[i].rows, cols, seed + 1));
      hup[i] = {host.back().data(), ms[i].type, ms[i].rows, cols};
      dup[i] = b.gpu->resident(hup[i]);
    }
    shape += std::string(i ? "+" : "") + std::string(type_name(ms[i].type)) + "x" + std::to_string(ms[i].rows) +
             (ms[i].swiglu_pair ? "(swiglu)" : "");
  }
  shape += " n=" + std::to_string(n);
  const auto x = random_floats(n * cols, 5, -2.f, 2.f);
  auto dx = b.up(x);
  std::vector<DeviceBuffer> fused, single, scratch;
  std::vector<MatmulTarget> targets;
  for (size_t i = 0; i < ms.size(); ++i) {
    fused.push_back(b.gpu->alloc(n * ms[i].rows * 4));
    single.push_back(b.gpu->alloc(n * ms[i].rows * 4));
    scratch.push_back(b.gpu->alloc(n * ms[i].rows * 4));
    targets.push_back({dw[i], fused.back().f32(), ms[i].rows, dup[i], scratch.back().f32()});
  }
  b.gpu->sync();
  const uint64_t k0 = cuda_kernels_launched();
  b.gpu->matmul_multi(targets, dx.f32(), cols, n);
  b.gpu->sync();
  if (n == 1) {
    EXPECT_EQ(cuda_kernels_launched() - k0, want_launches) << shape << ": one launch whatever the types";
  }
  for (size_t i = 0; i < ms.size(); ++i) {
    const int64_t rows = ms[i].rows;
    b.gpu->matmul(dw[i], dx.f32(), cols, n, single[i].f32(), rows);
    std::vector<float> ycpu(n * rows), ucpu(n * rows);
    b.cpu.matmul(hw[i], x.data(), cols, n, ycpu.data(), rows);
    if (ms[i].swiglu_pair) {
      b.gpu->matmul(dup[i], dx.f32(), cols, n, scratch[i].f32(), rows);
      b.gpu->swiglu(single[i].f32(), scratch[i].f32(), n, rows, single[i].f32());
      b.cpu.matmul(hup[i], x.data(), cols, n, ucpu.data(), rows);
      b.cpu.swiglu(ycpu.data(), ucpu.data(), n, rows, ycpu.data());
    }
    const auto got = b.down<float>(fused[i], ycpu.size());
    const std::string what = shape + " #" + std::to_string(i);
    const double bound = ms[i].type == GgmlType::F32 ? 1e-10 : 1e-4;
    report("CudaOps::matmul_multi vs CpuOps", what, nmse(ycpu, got), bound);
    if (!(nmse(ycpu, got) <= bound)) {
      // Which half differs (a failure seen only on a GPU): the gate/up products or the SwiGLU.
      std::vector<float> gcpu(n * rows);
      b.cpu.matmul(hw[i], x.data(), cols, n, gcpu.data(), rows);
      b.gpu->matmul(dw[i], dx.f32(), cols, n, single[i].f32(), rows);
      std::printf("[gpu-detail] %s | gate product: nmse %.3g%s\n", what.c_str(), nmse(gcpu, b.down<float>(single[i], gcpu.size())),
                  float_mismatch(gcpu, b.down<float>(single[i], gcpu.size()), static_cast<size_t>(rows)).c_str());
      if (ms[i].swiglu_pair) {
        b.gpu->matmul(dup[i], dx.f32(), cols, n, scratch[i].f32(), rows);
        std::printf("[gpu-detail] %s | up product: nmse %.3g%s\n", what.c_str(), nmse(ucpu, b.down<float>(scratch[i], ucpu.size())),
                    float_mismatch(ucpu, b.down<float>(scratch[i], ucpu.size()), static_cast<size_t>(rows)).c_str());
      }
      std::printf("[gpu-detail] %s | result:%s\n", what.c_str(), float_mismatch(ycpu, got, static_cast<size_t>(rows)).c_str());
      std::fflush(stdout);
    }
    report_exact("CudaOps::matmul_multi vs CudaOps::matmul", what, same_bits(got, b.down<float>(single[i], ycpu.size())));
  }
}

TEST(GpuFusedOps, MatmulMulti) {
  FERRY_REQUIRE_GPU();
  // A DeltaNet layer's projections (qkv, z, β, α: two weight types, one launch), an MoE layer's
  // (router, shared gate/up, gate logit), and more matrices than one launch takes.
  const std::vector<Matrix> deltanet = {{GgmlType::Q6_K, 96}, {GgmlType::Q4_K, 64}, {GgmlType::Q4_K, 8}, {GgmlType::Q4_K, 8}};
  const std::vector<Matrix> moe = {{GgmlType::F32, 32}, {GgmlType::Q4_K, 48, true}, {GgmlType::F32, 1}};
  const std::vector<Matrix> wide(9, Matrix{GgmlType::Q8_0, 5});
  check_multi(deltanet, 1, 1);
  check_multi({{GgmlType::Q4_K, 24}, {GgmlType::Q6_K, 8, true}, {GgmlType::Q8_0, 12}, {GgmlType::F32, 4}}, 1, 1);
  check_multi(moe, 1, 1);
  check_multi({{GgmlType::F32, 7}, {GgmlType::F32, 1}}, 1, 1);
  check_multi(wide, 1, 2);
  check_multi(moe, 3, 0);
  check_multi({{GgmlType::Q8_0, 40, true}}, 1, 1);
}

TEST(GpuFusedOps, ResidualNorm) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int64_t rows = 3, n = 2048;
  const auto x = random_floats(rows * n, 1, -3.f, 3.f), a = random_floats(rows * n, 2, -1.f, 1.f);
  const auto sh = random_floats(rows * n, 3), logit = random_floats(rows, 4, -2.f, 2.f);
  const auto w = random_floats(n, 5, 0.5f, 1.5f);
  auto dsh = b.up(sh), dlogit = b.up(logit), dw = b.up(w);
  for (int variant = 0; variant < 3; ++variant) {  // gate + norm, norm only, gate only (last block)
    const bool gate = variant != 1, norm = variant != 2;
    const std::string shape = std::string("3x2048") + (gate ? " gated" : "") + (norm ? " +norm" : "");
    std::vector<float> cx = x, ca = a, ch(rows * n, 0.f);
    ResidualNorm c;
    c.a = ca.data();
    c.b = gate ? sh.data() : nullptr;
    c.gate_logit = gate ? logit.data() : nullptr;
    c.w = norm ? w.data() : nullptr;
    c.eps = 1e-6f;
    c.h = ch.data();
    b.cpu.residual_norm(cx.data(), rows, n, c);

    std::vector<float> got[2][3];  // [fused, unfused][x, a, h]
    for (int unfused = 0; unfused < 2; ++unfused) {
      auto dx = b.up(x), da = b.up(a), dh = b.up(std::vector<float>(rows * n, 0.f));
      ResidualNorm g = c;
      g.a = da.f32();
      g.b = gate ? dsh.f32() : nullptr;
      g.gate_logit = gate ? dlogit.f32() : nullptr;
      g.w = norm ? dw.f32() : nullptr;
      g.h = dh.f32();
      b.gpu->sync();
      const uint64_t k0 = cuda_kernels_launched();
      if (unfused) b.gpu->Ops::residual_norm(dx.f32(), rows, n, g);
      else b.gpu->residual_norm(dx.f32(), rows, n, g);
      b.gpu->sync();
      EXPECT_EQ(cuda_kernels_launched() - k0, unfused ? (gate ? 2u : 1u) + (norm ? 1u : 0u) : 1u) << shape;
      got[unfused][0] = b.down<float>(dx, cx.size());
      got[unfused][1] = b.down<float>(da, ca.size());
      got[unfused][2] = b.down<float>(dh, ch.size());
    }
    report("CudaOps::residual_norm x vs CpuOps", shape, nmse(cx, got[0][0]), 1e-12);
    report("CudaOps::residual_norm a vs CpuOps", shape, nmse(ca, got[0][1]), 1e-12);
    report("CudaOps::residual_norm h vs CpuOps", shape, nmse(ch, got[0][2]), 1e-10);
    for (int k = 0; k < 3; ++k)
      report_exact("CudaOps::residual_norm vs the unfused CUDA ops", shape + " #" + std::to_string(k),
                   same_bits(got[0][k], got[1][k]));
  }
}

// One DeltaNet decode token's gates, conv + SiLU and q/k L2 norm (GdnOps::conv_l2_gates): the
// 35b-a3b head ratio (2 value heads per key head) at head size 64, conv kernel 4.
TEST(GpuFusedOps, DeltaNetConvL2Gates) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int32_t Hk = 2, Hv = 4, S = 64, K = 4;
  const int64_t C = 2 * Hk * S + Hv * S;
  const auto x = random_floats(C, 1, -2.f, 2.f), w = random_floats(C * K, 2, -0.5f, 0.5f);
  const auto state0 = random_floats((K - 1) * C, 3), ba = random_floats(2 * Hv, 4, -3.f, 3.f);
  const auto dt = random_floats(Hv, 5), ssm_a = random_floats(Hv, 6, -2.f, -0.1f);
  auto cpu_gdn = b.cpu.make_gdn_ops();
  auto gpu_gdn = b.gpu->make_gdn_ops();
  // The operands on either side: x, w, state, y, the raw [β | α] row, dt_bias, ssm_a, beta, g.
  auto prep = [&](const float* px, const float* pw, float* pstate, float* py, const float* pba, const float* pdt,
                  const float* pa, float* pbeta, float* pg) {
    GdnPrep p;
    p.x = px;
    p.ldx = C;
    p.w = pw;
    p.kernel = K;
    p.state = pstate;
    p.y = py;
    p.ldy = C;
    p.n_ch = C;
    p.n_l2_heads = 2 * Hk;
    p.dim = S;
    p.eps = 1e-6f;
    p.b = pba;
    p.ldb = 2 * Hv;
    p.a = pba + Hv;
    p.lda = 2 * Hv;
    p.dt_bias = pdt;
    p.ssm_a = pa;
    p.beta = pbeta;
    p.g = pg;
    p.ld_out = Hv;
    p.n_heads = Hv;
    return p;
  };
  // [y, state, beta, g] from the CPU, the fused CUDA call and the unfused CUDA calls.
  std::vector<float> cy(C), cstate = state0, cbeta(Hv), cg(Hv);
  cpu_gdn->conv_l2_gates(
      prep(x.data(), w.data(), cstate.data(), cy.data(), ba.data(), dt.data(), ssm_a.data(), cbeta.data(), cg.data()), 1);
  std::vector<float> got[2][4];
  for (int unfused = 0; unfused < 2; ++unfused) {
    auto dx = b.up(x), dw = b.up(w), dstate = b.up(state0), dba = b.up(ba), ddt = b.up(dt), da = b.up(ssm_a);
    DeviceBuffer dy = b.gpu->alloc(C * 4), dbeta = b.gpu->alloc(Hv * 4), dg = b.gpu->alloc(Hv * 4);
    const GdnPrep p = prep(dx.f32(), dw.f32(), dstate.f32(), dy.f32(), dba.f32(), ddt.f32(), da.f32(), dbeta.f32(),
                           dg.f32());
    b.gpu->sync();
    const uint64_t k0 = cuda_kernels_launched();
    if (unfused) gpu_gdn->GdnOps::conv_l2_gates(p, 1);
    else gpu_gdn->conv_l2_gates(p, 1);
    b.gpu->sync();
    EXPECT_EQ(cuda_kernels_launched() - k0, unfused ? 3u : 1u);
    got[unfused][0] = b.down<float>(dy, C);
    got[unfused][1] = b.down<float>(dstate, cstate.size());
    got[unfused][2] = b.down<float>(dbeta, Hv);
    got[unfused][3] = b.down<float>(dg, Hv);
  }
  const std::vector<float>* want[] = {&cy, &cstate, &cbeta, &cg};
  const char* names[] = {"y", "state", "beta", "g"};
  for (int k = 0; k < 4; ++k) {
    report(std::string("GdnOps::conv_l2_gates ") + names[k] + " vs CpuOps", "Hk=2 Hv=4 S=64 K=4", nmse(*want[k], got[0][k]),
           1e-10);
    report_exact(std::string("GdnOps::conv_l2_gates ") + names[k] + " vs the unfused CUDA ops", "Hk=2 Hv=4 S=64 K=4",
                 same_bits(got[0][k], got[1][k]));
  }
}

// The MoE input's projections with the routing in the same launch (Ops::matmul_multi_route: the
// last block to finish routes): ids and weights bit for bit those of the unfused CUDA sequence
// (matmul_multi, then moe_route), the same ids as the CPU and weights within bounds. Each case
// runs twice on the same ops (the block counter must reset itself), and for two tokens (the
// per-op fallback).
TEST(GpuFusedOps, MatmulMultiRoute) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int64_t cols = 512, F = 48;
  const int32_t n_expert = 64, k = 8;
  const auto router = random_floats(n_expert * cols, 31, -0.2f, 0.2f);
  const auto gate_q = quantize_rows(GgmlType::Q4_K, random_floats(F * cols, 32), F, cols, 32);
  const auto up_q = quantize_rows(GgmlType::Q4_K, random_floats(F * cols, 33), F, cols, 33);
  const WeightView hr{router.data(), GgmlType::F32, n_expert, cols};
  const WeightView hg{gate_q.data(), GgmlType::Q4_K, F, cols}, hu{up_q.data(), GgmlType::Q4_K, F, cols};
  const WeightView dr = b.gpu->resident(hr), dg = b.gpu->resident(hg), du = b.gpu->resident(hu);
  for (const int64_t n : {1, 2}) {
    for (const bool renorm : {true, false}) {
      const std::string shape = "F32x64 router + Q4_Kx48 swiglu, top-8, n=" + std::to_string(n) + (renorm ? " renorm" : " scale 2.5");
      const float scale = renorm ? 1.f : 2.5f;
      const auto x = random_floats(n * cols, 34 + n, -2.f, 2.f);
      // CPU: the defining sequence.
      std::vector<float> clog(n * n_expert), cg(n * F), cu(n * F), cw(n * k);
      std::vector<int32_t> cid(n * k);
      const MatmulTarget ct[] = {{hr, clog.data(), n_expert}, {hg, cg.data(), F, hu, cu.data()}};
      RouteArgs cr{clog.data(), n_expert, k, renorm, scale, cid.data(), cw.data()};
      b.cpu.matmul_multi_route(ct, x.data(), cols, n, cr);
      auto dx = b.up(x);
      std::vector<int32_t> ids[2];
      std::vector<float> weights[2], shared[2];
      for (int unfused = 0; unfused < 2; ++unfused)
        for (int rep = 0; rep < 2; ++rep) {
          DeviceBuffer dlog = b.gpu->alloc(n * n_expert * 4), dgo = b.gpu->alloc(n * F * 4), duo = b.gpu->alloc(n * F * 4);
          DeviceBuffer did = b.gpu->alloc(n * k * 4), dw = b.gpu->alloc(n * k * 4);
          const MatmulTarget gt[] = {{dr, dlog.f32(), n_expert}, {dg, dgo.f32(), F, du, duo.f32()}};
          const RouteArgs gr{dlog.f32(), n_expert, k, renorm, scale, did.i32(), dw.f32()};
          b.gpu->sync();
          const uint64_t k0 = cuda_kernels_launched();
          if (unfused) b.gpu->Ops::matmul_multi_route(gt, dx.f32(), cols, n, gr);
          else b.gpu->matmul_multi_route(gt, dx.f32(), cols, n, gr);
          b.gpu->sync();
          if (n == 1) {
            EXPECT_EQ(cuda_kernels_launched() - k0, unfused ? 2u : 1u) << shape;
          }
          const auto got_ids = b.down<int32_t>(did, cid.size());
          const auto got_w = b.down<float>(dw, cw.size());
          const auto got_sh = b.down<float>(dgo, cg.size());
          if (rep == 1) {
            EXPECT_EQ(got_ids, ids[unfused]) << shape << ": a second call routes the same";
            report_exact("CudaOps::matmul_multi_route again", shape, same_bits(got_w, weights[unfused]));
          }
          ids[unfused] = got_ids;
          weights[unfused] = got_w;
          shared[unfused] = got_sh;
        }
      EXPECT_EQ(ids[0], cid) << shape << ": the CPU's experts";
      report("CudaOps::matmul_multi_route weights vs CpuOps", shape, nmse(cw, weights[0]), 1e-10);
      report("CudaOps::matmul_multi_route shared gate vs CpuOps", shape, nmse(cg, shared[0]), 1e-4);
      EXPECT_EQ(ids[0], ids[1]) << shape << ": the unfused CUDA ops' experts";
      report_exact("CudaOps::matmul_multi_route vs the unfused CUDA ops", shape + " weights", same_bits(weights[0], weights[1]));
      report_exact("CudaOps::matmul_multi_route vs the unfused CUDA ops", shape + " shared", same_bits(shared[0], shared[1]));
    }
  }
}

// The delta rule with its output's gated norm in the same launch (GdnOps::delta_rule_gated_norm:
// the last of a head's blocks normalises it): bit for bit the unfused CUDA rule + norm, within the
// recurrent bound of the CPU; head sizes 64 and 128 (2 and 4 blocks per head), 1 and 3 tokens,
// twice on the same ops (the per-head counters must reset themselves).
TEST(GpuFusedOps, DeltaRuleGatedNorm) {
  FERRY_REQUIRE_GPU();
  Backends b;
  auto cpu_gdn = b.cpu.make_gdn_ops();
  auto gpu_gdn = b.gpu->make_gdn_ops();
  for (const int32_t S : {64, 128})
    for (const int64_t n : {1, 3}) {
      const int32_t Hk = 2, Hv = 4;
      const int64_t ldk = 2 * Hk * S + Hv * S, V = int64_t{Hv} * S;  // q | k | v in one conv row, as the model
      const std::string shape = "Hk=2 Hv=4 S=" + std::to_string(S) + " n=" + std::to_string(n);
      auto conv = random_floats(n * ldk, 41, -0.3f, 0.3f);
      const auto g = random_floats(n * Hv, 42, -2.f, -0.01f), beta = random_floats(n * Hv, 43, 0.05f, 0.95f);
      const auto state0 = random_floats(int64_t{Hv} * S * S, 44, -0.3f, 0.3f);
      const auto z = random_floats(n * V, 45, -3.f, 3.f), w = random_floats(S, 46, 0.5f, 1.5f);
      const cpu::GdnShape sh{Hk, Hv, S, cpu::GdnKeyHeadMap::tiled};
      const float scale = 1.f / std::sqrt(static_cast<float>(S)), eps = 1e-6f;
      auto inputs = [&](const float* c, const float* pg, const float* pb) {
        return cpu::GdnInputs{c, ldk, c + Hk * S, ldk, c + 2 * Hk * S, ldk, pg, pb};
      };
      std::vector<float> cstate = state0, cout(n * V);
      cpu_gdn->delta_rule_gated_norm(sh, inputs(conv.data(), g.data(), beta.data()), n, scale, cstate.data(), cout.data(),
                                     V, z.data(), V, w.data(), eps);
      std::vector<float> got[2][2];  // [fused, unfused][out, state]
      auto dconv = b.up(conv), dg = b.up(g), dbeta = b.up(beta), dz = b.up(z), dw = b.up(w);
      for (int unfused = 0; unfused < 2; ++unfused)
        for (int rep = 0; rep < 2; ++rep) {
          auto dstate = b.up(state0);
          DeviceBuffer dout = b.gpu->alloc(n * V * 4);
          b.gpu->sync();
          const uint64_t k0 = cuda_kernels_launched();
          const cpu::GdnInputs in = inputs(dconv.f32(), dg.f32(), dbeta.f32());
          if (unfused)
            gpu_gdn->GdnOps::delta_rule_gated_norm(sh, in, n, scale, dstate.f32(), dout.f32(), V, dz.f32(), V, dw.f32(), eps);
          else
            gpu_gdn->delta_rule_gated_norm(sh, in, n, scale, dstate.f32(), dout.f32(), V, dz.f32(), V, dw.f32(), eps);
          b.gpu->sync();
          EXPECT_EQ(cuda_kernels_launched() - k0, unfused ? 2u : 1u) << shape;
          const auto out = b.down<float>(dout, cout.size()), state = b.down<float>(dstate, cstate.size());
          if (rep == 1) report_exact("GdnOps::delta_rule_gated_norm again", shape, same_bits(out, got[unfused][0]));
          got[unfused][0] = out;
          got[unfused][1] = state;
        }
      report("GdnOps::delta_rule_gated_norm out vs CpuOps", shape, nmse(cout, got[0][0]), 1e-9);
      report("GdnOps::delta_rule_gated_norm state vs CpuOps", shape, nmse(cstate, got[0][1]), 1e-9);
      report_exact("GdnOps::delta_rule_gated_norm vs the unfused CUDA ops", shape + " out", same_bits(got[0][0], got[1][0]));
      report_exact("GdnOps::delta_rule_gated_norm vs the unfused CUDA ops", shape + " state", same_bits(got[0][1], got[1][1]));
    }
}

#else

TEST(GpuFusedOps, Skipped) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace ferry::gputest
