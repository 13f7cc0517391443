// Row-wise and elementwise GPU ops vs double-precision references written from ggml's definitions.
#include "tests/gpu/gpu_test_util.hpp"

#include <algorithm>
#include <numeric>

#include "runtime/core/fp16.hpp"
#include "runtime/core/types.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/ops.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

TEST(GpuOps, RmsNorm) {
  FERRY_REQUIRE_GPU();
  // Per token (ld = n) and per head inside wider rows (qwen35 q: heads of 256 at stride 512).
  struct Case { int64_t rows, n, ld; };
  for (const Case c : {Case{37, 2048, 2048}, Case{64, 256, 512}, Case{5, 128, 130}}) {
    const auto x = random_floats(c.rows * c.ld, 1, -3.f, 3.f);
    const auto w = random_floats(c.n, 2, 0.5f, 1.5f);
    std::vector<double> ref(c.rows * c.ld);
    for (int64_t r = 0; r < c.rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < c.n; ++i) ss += double(x[r * c.ld + i]) * x[r * c.ld + i];
      const double s = 1.0 / std::sqrt(ss / c.n + 1e-6);
      for (int64_t i = 0; i < c.ld; ++i) ref[r * c.ld + i] = i < c.n ? x[r * c.ld + i] * s * w[i] : x[r * c.ld + i];
    }
    DevBuf<float> dx(x), dw(w);
    cuda::rmsnorm(dx.get(), c.ld, dw.get(), dx.get(), c.ld, c.rows, c.n, 1e-6f, nullptr);  // in place
    report("rmsnorm", std::to_string(c.rows) + "x" + std::to_string(c.n) + " ld=" + std::to_string(c.ld),
           nmse(ref, dx.download()), 1e-11);
  }
}

TEST(GpuOps, L2AndGatedNorm) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 40, n = 128;
  const auto x = random_floats(rows * n, 3, -2.f, 2.f), z = random_floats(rows * n, 4, -3.f, 3.f);
  const auto w = random_floats(n, 5, 0.5f, 1.5f);
  std::vector<double> l2(rows * n), gated(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    for (int64_t i = 0; i < n; ++i) {
      l2[r * n + i] = 0.5 * x[r * n + i] / std::max(std::sqrt(ss), 1e-6);
      const double g = z[r * n + i];
      gated[r * n + i] = x[r * n + i] / std::sqrt(ss / n + 1e-6) * w[i] * g / (1 + std::exp(-g));
    }
  }
  DevBuf<float> dx(x), dz(z), dw(w), dy(rows * n);
  cuda::l2norm(dx.get(), n, dy.get(), n, rows, n, 1e-6f, 0.5f, nullptr);
  report("l2norm(scale 0.5)", "40x128", nmse(l2, dy.download()), 1e-11);
  cuda::rmsnorm_gated(dx.get(), n, dw.get(), dz.get(), n, dy.get(), n, rows, n, 1e-6f, nullptr);
  report("rmsnorm_gated", "40x128", nmse(gated, dy.download()), 1e-11);
}

TEST(GpuOps, RopeNeox) {
  FERRY_REQUIRE_GPU();
  struct Case { int heads, head_dim, n_rot; float base; int64_t ld_head; };
  // qwen35 attention (64 of 256 dims, q heads at stride 512 with the gate between) and qwen3 (all 128).
  for (const Case c : {Case{16, 256, 64, 1e7f, 512}, Case{4, 128, 128, 1e6f, 128}}) {
    const int64_t n_tokens = 9, ld_token = c.heads * c.ld_head;
    const std::vector<int32_t> pos = {0, 1, 2, 7, 100, 511, 2047, 4000, 4095};
    const auto x = random_floats(n_tokens * ld_token, 6, -2.f, 2.f);
    std::vector<double> ref(x.begin(), x.end());
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int h = 0; h < c.heads; ++h)
        for (int i = 0; i < c.n_rot / 2; ++i) {
          const double theta = pos[t] * std::pow(double(c.base), -2.0 * i / c.n_rot);
          const int64_t o = t * ld_token + h * c.ld_head;
          const double x0 = x[o + i], x1 = x[o + i + c.n_rot / 2];
          ref[o + i] = x0 * std::cos(theta) - x1 * std::sin(theta);
          ref[o + i + c.n_rot / 2] = x0 * std::sin(theta) + x1 * std::cos(theta);
        }
    DevBuf<float> dx(x);
    DevBuf<int32_t> dpos(pos);
    cuda::rope_neox(dx.get(), n_tokens, c.heads, c.head_dim, c.n_rot, ld_token, c.ld_head, dpos.get(), c.base, nullptr);
    // Float angles (as ggml) drift from the exact angle by ~pos·ulp: at pos ≤ 4095 NMSE ~1e-9;
    // a wrong pairing or frequency gives NMSE ~1.
    report("rope_neox", std::to_string(c.heads) + "h x " + std::to_string(c.head_dim) + " rot=" + std::to_string(c.n_rot),
           nmse(ref, dx.download()), 1e-6);
  }
}

TEST(GpuOps, Elementwise) {
  FERRY_REQUIRE_GPU();
  const int64_t n_tokens = 3, n = 1000, N = n_tokens * n;
  const auto a = random_floats(N, 7, -4.f, 4.f), b = random_floats(N, 8), gl = random_floats(n_tokens, 9, -3.f, 3.f);
  std::vector<double> sw(N), ad(N), sc(N), sg(N);
  for (int64_t i = 0; i < N; ++i) {
    sw[i] = a[i] / (1 + std::exp(-double(a[i]))) * b[i];
    ad[i] = double(a[i]) + b[i];
    sc[i] = a[i] * 0.37;
    sg[i] = double(b[i]) + a[i] / (1 + std::exp(-double(gl[i / n])));
  }
  DevBuf<float> da(a), db(b), dg(gl), dy(N);
  cuda::swiglu(da.get(), db.get(), dy.get(), N, nullptr);
  report("swiglu", std::to_string(N), nmse(sw, dy.download()), 1e-12);
  cuda::add(da.get(), db.get(), dy.get(), N, nullptr);
  report("add", std::to_string(N), nmse(ad, dy.download()), 1e-13);
  cuda::scale(da.get(), 0.37f, dy.get(), N, nullptr);
  report("scale", std::to_string(N), nmse(sc, dy.download()), 1e-13);
  cuda::sigmoid_gate_add(db.get(), da.get(), dg.get(), n_tokens, n, nullptr);
  report("sigmoid_gate_add", "3x1000", nmse(sg, db.download()), 1e-12);
}

TEST(GpuOps, RouteTopK) {
  FERRY_REQUIRE_GPU();
  struct Case { int64_t n_tokens; int n_expert, k; bool renorm; float scale; };
  for (const Case c : {Case{5, 128, 8, true, 1.f}, Case{3, 256, 8, true, 2.5f}, Case{2, 60, 40, false, 0.f}}) {
    const auto logits = random_floats(c.n_tokens * c.n_expert, 10 + c.k, -4.f, 4.f);
    std::vector<int32_t> ids_ref(c.n_tokens * c.k);
    std::vector<double> w_ref(c.n_tokens * c.k);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const float* l = logits.data() + t * c.n_expert;
      const double mx = *std::max_element(l, l + c.n_expert);
      std::vector<double> p(c.n_expert);
      double sum = 0;
      for (int e = 0; e < c.n_expert; ++e) sum += p[e] = std::exp(l[e] - mx);
      std::vector<int> idx(c.n_expert);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return p[x] > p[y]; });
      double sel = 0;
      for (int j = 0; j < c.k; ++j) sel += p[idx[j]] / sum;
      for (int j = 0; j < c.k; ++j) {
        ids_ref[t * c.k + j] = idx[j];
        double w = p[idx[j]] / sum;
        if (c.renorm) w /= sel;
        if (c.scale != 0.f && c.scale != 1.f) w *= c.scale;
        w_ref[t * c.k + j] = w;
      }
    }
    DevBuf<float> dl(logits), dw(c.n_tokens * c.k);
    DevBuf<int32_t> di(c.n_tokens * c.k);
    cuda::route_topk(dl.get(), c.n_tokens, c.n_expert, c.k, di.get(), dw.get(), c.renorm, c.scale, nullptr);
    const std::string shape = std::to_string(c.n_tokens) + "x" + std::to_string(c.n_expert) + " k=" + std::to_string(c.k);
    report_exact("route_topk ids", shape, di.download() == ids_ref);
    report("route_topk weights", shape, nmse(w_ref, dw.download()), 1e-12);
  }
}

TEST(GpuOps, Argmax) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 4, n = 151936;
  auto x = random_floats(rows * n, 11, -10.f, 10.f);
  x[0 * n + 5] = 50.f;   // row 0: clear max
  x[1 * n + 9] = 60.f;   // row 1: tie, first wins
  x[1 * n + 90000] = 60.f;
  x[2 * n + 3] = std::nanf("");  // row 2: NaN ignored
  x[2 * n + n - 1] = 70.f;
  for (int64_t i = 0; i < n; ++i) x[3 * n + i] = std::nanf("");  // row 3: all NaN → −1
  DevBuf<float> dx(x);
  DevBuf<int32_t> out(rows);
  cuda::argmax_rows(dx.get(), n, rows, n, out.get(), nullptr);
  report_exact("argmax_rows", "4x151936", out.download() == std::vector<int32_t>{5, 9, static_cast<int32_t>(n - 1), -1});
}

TEST(GpuOps, KvStore) {
  FERRY_REQUIRE_GPU();
  const int64_t n_ctx = 16, row = 512, p0 = 5, n_tokens = 3, ld = 600;
  const auto src = random_floats(n_tokens * ld, 12, -8.f, 8.f);
  DevBuf<float> dsrc(src);
  DevBuf<uint16_t> c16(n_ctx * row);
  DevBuf<float> c32(n_ctx * row);
  FERRY_CUDA_CHECK(cudaMemset(c16.get(), 0, n_ctx * row * 2));
  FERRY_CUDA_CHECK(cudaMemset(c32.get(), 0, n_ctx * row * 4));
  cuda::kv_store(dsrc.get(), ld, c16.get(), GgmlType::F16, p0, n_tokens, row, nullptr);
  cuda::kv_store(dsrc.get(), ld, c32.get(), GgmlType::F32, p0, n_tokens, row, nullptr);
  const auto h16 = c16.download();
  const auto h32 = c32.download();
  bool eq = true;
  for (int64_t r = 0; r < n_ctx; ++r)
    for (int64_t e = 0; e < row; ++e) {
      const bool in = r >= p0 && r < p0 + n_tokens;
      const float v = in ? src[(r - p0) * ld + e] : 0.f;
      eq &= h16[r * row + e] == (in ? fp32_to_fp16(v) : 0);
      eq &= h32[r * row + e] == v;
    }
  report_exact("kv_store f16/f32", "3 rows of 512 at p0=5", eq);
  // Not a KV cache type: refused (the nine are tests/gpu/test_gpu_kv_quant.cpp's).
  EXPECT_THROW(cuda::kv_store(dsrc.get(), ld, c16.get(), GgmlType::Q4_K, p0, n_tokens, row, nullptr), Error);
}

#else
TEST(GpuOps, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
