// Quantized matvec/matmul (direct, tiled, cuBLAS), dequantize and embedding on the GPU vs the CPU
// reference dequantizer (kernels/cpu, bit-exact with ggml) and double-precision products.
#include "tests/gpu/gpu_test_util.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/core/fp16.hpp"
#include "runtime/core/types.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/matmul.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

const auto& kTypes = kCudaWeightTypes;

struct QuantMatrix {
  std::vector<uint8_t> bytes;  // (rows, row_bytes)
  std::vector<float> deq;      // (rows, cols): what the GPU must see
};

QuantMatrix make_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  QuantMatrix m;
  m.bytes = quantize_rows(t, random_floats(static_cast<size_t>(rows * cols), seed), rows, cols, seed);
  m.deq = dequantize_rows(t, m.bytes.data(), rows, cols);
  return m;
}

// Random bytes in every field (all bit patterns of scales, highs, quants) with finite fp16 scales
// (MXFP4: exponents 2^-11..2^7): exercises the decoders beyond what the quantizers produce.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto info = type_info(t);
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  std::vector<uint8_t> b(rows * rb);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  auto put_half = [&](uint8_t* p) {
    const uint16_t h = fp32_to_fp16(u(rng));
    std::memcpy(p, &h, 2);
  };
  for (size_t off = 0; off < b.size(); off += info.block_bytes) {
    uint8_t* blk = b.data() + off;
    switch (t) {
      case GgmlType::Q8_0:
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS: put_half(blk); break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: put_half(blk); put_half(blk + 2); break;
      case GgmlType::Q2_K: put_half(blk + 80); put_half(blk + 82); break;
      case GgmlType::Q3_K: put_half(blk + 108); break;
      case GgmlType::Q6_K: put_half(blk + 208); break;
      case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(117 + rng() % 19); break;
      default: break;
    }
  }
  return b;
}

// Y (n, rows) = X (n, cols) · Wᵀ in double.
std::vector<double> ref_matmul(const std::vector<float>& W, int64_t rows, int64_t cols,
                               const std::vector<float>& X, int64_t ldx, int64_t n) {
  std::vector<double> Y(n * rows);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += double(W[r * cols + c]) * X[b * ldx + c];
      Y[b * rows + r] = acc;
    }
  return Y;
}

std::string shape_str(GgmlType t, int64_t rows, int64_t cols, int64_t n) {
  return std::string(type_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n);
}

TEST(GpuMatmul, DirectMatchesReference) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 301, cols = 1024;
  for (GgmlType t : kTypes) {
    const auto m = make_matrix(t, rows, cols, 11 + static_cast<uint32_t>(t));
    DevBuf<uint8_t> dW(m.bytes);
    for (int64_t n : {1, 3, 8, 13}) {
      const int64_t ldx = n == 13 ? cols + 4 : cols;  // padded rows in one case
      const auto X = random_floats(static_cast<size_t>(n * ldx), 5 + static_cast<uint32_t>(n), -2.f, 2.f);
      DevBuf<float> dX(X), dY(static_cast<size_t>(n * rows));
      cuda::matmul_direct(t, dW.get(), rows, cols, dX.get(), ldx, n, dY.get(), rows, nullptr);
      const auto ref = ref_matmul(m.deq, rows, cols, X, ldx, n);
      report("matmul_direct", shape_str(t, rows, cols, n), nmse(ref, dY.download()), 1e-9);
    }
  }
}

// Large matrices take the 4-rows-per-warp matvec; 8195 rows leaves a partial last warp.
TEST(GpuMatmul, MatvecManyRows) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 8195, cols = 256;
  for (GgmlType t : kTypes) {
    const auto m = make_matrix(t, rows, cols, 71 + static_cast<uint32_t>(t));
    const auto x = random_floats(cols, 72, -2.f, 2.f);
    DevBuf<uint8_t> dW(m.bytes);
    DevBuf<float> dx(x), dy(rows);
    cuda::matvec(t, dW.get(), rows, cols, dx.get(), dy.get(), nullptr);
    report("matvec(4 rows/warp)", shape_str(t, rows, cols, 1), nmse(ref_matmul(m.deq, rows, cols, x, cols, 1), dy.download()), 1e-9);
  }
}

// The integer matvec's quantized activations, read back from its workspace: q (cols int8) then
// (d, s) per block of 32.
struct Q8Activations {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<float> deq;  // d·q: what the integer path multiplies the weights with
};

Q8Activations read_q8(const DevBuf<uint8_t>& ws, int64_t cols) {
  const auto raw = ws.download();
  Q8Activations a;
  a.q.resize(cols);
  std::memcpy(a.q.data(), raw.data(), cols);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float ds[2];
    std::memcpy(ds, raw.data() + cols + 8 * b, 8);
    a.d.push_back(ds[0]);
    a.s.push_back(ds[1]);
    for (int i = 0; i < 32; ++i) a.deq.push_back(ds[0] * static_cast<float>(a.q[32 * b + i]));
  }
  return a;
}

// The quantization the kernel must do, on the CPU: d = max|x| / 127, q = round(x / d), s = d·Σq.
bool q8_matches_cpu(const Q8Activations& a, const std::vector<float>& x) {
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float d = amax / 127.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = amax == 0.f ? 0 : static_cast<int>(std::round(x[32 * b + i] / d));
      if (q != a.q[32 * b + i]) return false;
      sum += q;
    }
    if (d != a.d[b] || d * static_cast<float>(sum) != a.s[b]) return false;
  }
  return true;
}

const GgmlType kQ8DotTypes[] = {GgmlType::Q4_K, GgmlType::Q6_K,   GgmlType::Q5_K,   GgmlType::Q8_0,  GgmlType::Q4_0,
                                GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,   GgmlType::Q2_K,  GgmlType::Q3_K,
                                GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

// matvec_q8 against two references:
//  * tight: W (dequantized by the CPU reference) times the kernel's own dequantized 8-bit
//    activations, in double. The integer sums are exact, so only float rounding of the per-block
//    scale products and of the row sum remains: NMSE ~1e-14 like the float matvec; bound 1e-10.
//    A wrong scale, nibble, high bit or block index changes whole sub-blocks: NMSE ≳ 1e-3.
//  * loose: W times the float activations. Rounding x to 8 bits per block of 32 adds an error
//    uniform in ±d/2, d = max|x|/127: for x uniform in ±2, variance d²/12 ≈ 2e-5 against E[x²] =
//    4/3, so NMSE ≈ 1.5e-5 in expectation; bound 1e-4.
// Shapes: a partial warp of rows with more units than lanes (37x2560), random bytes in every
// field (301x768, all scale/min/high-bit patterns), and the 4-rows-per-warp kernel with a partial
// last warp (8195 rows).
TEST(GpuMatmul, MatvecQ8MatchesReference) {
  FERRY_REQUIRE_GPU();
  struct Shape {
    int64_t rows, cols;
    bool random_bytes;
  };
  const Shape shapes[] = {{37, 2560, false}, {301, 768, true}, {8195, 256, false}};
  for (GgmlType t : kQ8DotTypes) {
    for (const Shape& sh : shapes) {
      const uint32_t seed = 81 + static_cast<uint32_t>(t) + static_cast<uint32_t>(sh.rows);
      QuantMatrix m;
      if (sh.random_bytes) {
        m.bytes = random_blocks(t, sh.rows, sh.cols, seed);
        m.deq = dequantize_rows(t, m.bytes.data(), sh.rows, sh.cols);
      } else {
        m = make_matrix(t, sh.rows, sh.cols, seed);
      }
      const auto x = random_floats(sh.cols, seed + 1, -2.f, 2.f);
      DevBuf<uint8_t> dW(m.bytes), ws(cuda::matvec_q8_workspace_bytes(sh.cols));
      DevBuf<float> dx(x), dy(sh.rows);
      cuda::matvec_q8(t, dW.get(), sh.rows, sh.cols, dx.get(), dy.get(), ws.get(), ws.size(), nullptr);
      const auto y = dy.download();
      const auto xq = read_q8(ws, sh.cols);
      const std::string shape = shape_str(t, sh.rows, sh.cols, 1) + (sh.random_bytes ? " random bytes" : "");
      report_exact("quantize_q8", shape, q8_matches_cpu(xq, x));
      report("matvec_q8 vs W·x̃", shape, nmse(ref_matmul(m.deq, sh.rows, sh.cols, xq.deq, sh.cols, 1), y), 1e-10);
      report("matvec_q8 vs W·x", shape, nmse(ref_matmul(m.deq, sh.rows, sh.cols, x, sh.cols, 1), y), 1e-4);
    }
  }
}

// cuda::matmul takes the integer path only when asked, for a single vector of a type with an
// integer dot, with enough workspace; otherwise the float kernels (bit-identical to matvec).
TEST(GpuMatmul, DispatchInt8Dot) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 130, cols = 512;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::F16}) {
    const auto m = make_matrix(t, rows, cols, 91);
    const auto x = random_floats(cols, 92, -2.f, 2.f);
    DevBuf<uint8_t> dW(m.bytes), ws(cuda::matvec_q8_workspace_bytes(cols)), ws_q8(ws.size());
    DevBuf<float> dx(x), y_float(rows), y_int(rows), y_small_ws(rows), y_q8(rows);
    cuda::matvec(t, dW.get(), rows, cols, dx.get(), y_float.get(), nullptr);
    cuda::matmul(t, dW.get(), rows, cols, dx.get(), cols, 1, y_int.get(), rows, nullptr, ws.get(), ws.size(), nullptr,
                 cuda::GemmPrecision::f16, true);
    cuda::matmul(t, dW.get(), rows, cols, dx.get(), cols, 1, y_small_ws.get(), rows, nullptr, ws.get(), ws.size() - 1,
                 nullptr, cuda::GemmPrecision::f16, true);
    const auto f = y_float.download(), i = y_int.download(), sw = y_small_ws.download();
    const bool q8 = cuda::matvec_q8_supported(t);
    if (q8) {
      cuda::matvec_q8(t, dW.get(), rows, cols, dx.get(), y_q8.get(), ws_q8.get(), ws_q8.size(), nullptr);
      EXPECT_EQ(i, y_q8.download()) << "int8_dot dispatch must run matvec_q8";
      EXPECT_NE(i, f);
      report("matmul(dispatch, int8_dot)", shape_str(t, rows, cols, 1),
             nmse(ref_matmul(m.deq, rows, cols, x, cols, 1), i), 1e-4);
    } else {
      EXPECT_EQ(i, f) << "no integer dot for this type: the float matvec";
    }
    EXPECT_EQ(sw, f) << "workspace too small: the float matvec";
  }
  DevBuf<uint8_t> w(144 * 4), ws(1024);
  DevBuf<float> x(1024), y(16);
  EXPECT_THROW(cuda::matvec_q8(GgmlType::F16, w.get(), 2, 256, x.get(), y.get(), ws.get(), ws.size(), nullptr), Error);
  EXPECT_THROW(cuda::matvec_q8(GgmlType::Q4_K, w.get(), 2, 256, x.get(), y.get(), ws.get(), 100, nullptr), Error);
  EXPECT_THROW(cuda::matvec_q8(GgmlType::Q4_K, w.get(), 2, 300, x.get(), y.get(), ws.get(), ws.size(), nullptr), Error);
}

TEST(GpuMatmul, TiledMatchesReference) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 77, cols = 768, n = 45;
  for (GgmlType t : kTypes) {
    const int64_t c = (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K) ? 768 : cols;
    const auto m = make_matrix(t, rows, c, 21 + static_cast<uint32_t>(t));
    const auto X = random_floats(static_cast<size_t>(n * c), 9, -2.f, 2.f);
    DevBuf<uint8_t> dW(m.bytes);
    DevBuf<float> dX(X), dY(static_cast<size_t>(n * rows));
    cuda::matmul_tiled(t, dW.get(), rows, c, dX.get(), c, n, dY.get(), rows, nullptr);
    report("matmul_tiled", shape_str(t, rows, c, n), nmse(ref_matmul(m.deq, rows, c, X, c, n), dY.download()), 1e-9);
  }
}

TEST(GpuMatmul, BlasMatchesReference) {
  FERRY_REQUIRE_GPU();
  std::string why;
  auto blas = cuda::Blas::try_load(&why);
  if (!blas) GTEST_SKIP() << "cuBLAS not loadable: " << why;
  std::printf("[gpu-info] cuBLAS loaded from %s\n", blas->library().c_str());
  DevBuf<uint8_t> blas_ws(32 << 20);
  blas->set_workspace(blas_ws.get(), blas_ws.size());
  const int64_t rows = 300, cols = 512, n = 70;
  for (GgmlType t : kTypes) {
    const auto m = make_matrix(t, rows, cols, 31 + static_cast<uint32_t>(t));
    const int64_t ldx = cols + 8;
    const auto X = random_floats(static_cast<size_t>(n * ldx), 13, -2.f, 2.f);
    DevBuf<uint8_t> dW(m.bytes);
    DevBuf<float> dX(X), dY(static_cast<size_t>(n * rows));
    const auto ref = ref_matmul(m.deq, rows, cols, X, ldx, n);
    for (auto p : {cuda::GemmPrecision::f16, cuda::GemmPrecision::f32}) {
      const bool f16 = p == cuda::GemmPrecision::f16;
      // The minimum workspace forces the chunked path (128 rows at a time) for quantized types.
      for (bool minimal : {false, true}) {
        const size_t ws_bytes = minimal ? cuda::matmul_blas_min_workspace_bytes(t, cols, n, p)
                                        : cuda::matmul_blas_workspace_bytes(t, rows, cols, n, p);
        DevBuf<uint8_t> ws(ws_bytes);
        cuda::matmul_blas(*blas, p, t, dW.get(), rows, cols, dX.get(), ldx, n, dY.get(), rows, ws.get(), ws_bytes, nullptr);
        // f16 inputs: X and W rounded to half (2^-11 relative) → NMSE ~1e-7.
        report(std::string("matmul_blas_") + (f16 ? "f16" : "f32") + (minimal ? "_chunked" : ""),
               shape_str(t, rows, cols, n), nmse(ref, dY.download()), f16 ? 1e-5 : 1e-8);
      }
    }
  }
}

TEST(GpuMatmul, DispatchPicksAWorkingPath) {
  FERRY_REQUIRE_GPU();
  auto blas = cuda::Blas::try_load();
  const int64_t rows = 130, cols = 512;
  const auto m = make_matrix(GgmlType::Q4_K, rows, cols, 41);
  DevBuf<uint8_t> dW(m.bytes), ws(8 << 20);
  for (int64_t n : {1, 8, 9, 200}) {
    const auto X = random_floats(static_cast<size_t>(n * cols), 17);
    DevBuf<float> dX(X), dY(static_cast<size_t>(n * rows));
    cuda::matmul(GgmlType::Q4_K, dW.get(), rows, cols, dX.get(), cols, n, dY.get(), rows, blas.get(), ws.get(),
                 ws.size(), nullptr);
    report("matmul(dispatch)", shape_str(GgmlType::Q4_K, rows, cols, n), nmse(ref_matmul(m.deq, rows, cols, X, cols, n), dY.download()),
           blas ? 1e-5 : 1e-9);
  }
}

TEST(GpuMatmul, DequantizeIsBitExact) {
  FERRY_REQUIRE_GPU();
  const int64_t rows = 19, cols = 512;
  for (GgmlType t : kTypes) {
    const bool quant = type_info(t).block_values > 1;
    const auto bytes = quant ? random_blocks(t, rows, cols, 51) : make_matrix(t, rows, cols, 52).bytes;
    const auto ref = dequantize_rows(t, bytes.data(), rows, cols);
    DevBuf<uint8_t> dW(bytes);
    DevBuf<float> out(ref.size());
    cuda::dequantize(t, dW.get(), rows, cols, out.get(), nullptr);
    const auto got = out.download();
    report_exact("dequantize", shape_str(t, rows, cols, 0), std::memcmp(got.data(), ref.data(), ref.size() * 4) == 0);
    DevBuf<uint16_t> outh(ref.size());
    cuda::dequantize_f16(t, dW.get(), rows, cols, outh.get(), nullptr);
    const auto goth = outh.download();
    bool eq = true;
    for (size_t i = 0; i < ref.size(); ++i) eq &= goth[i] == fp32_to_fp16(ref[i]);
    report_exact("dequantize_f16", shape_str(t, rows, cols, 0), eq);
  }
}

TEST(GpuMatmul, EmbeddingRows) {
  FERRY_REQUIRE_GPU();
  const int64_t vocab = 1000, embd = 256;
  for (GgmlType t : kTypes) {
    const auto m = make_matrix(t, vocab, embd, 61 + static_cast<uint32_t>(t));
    const std::vector<int32_t> ids = {0, 999, 17, 17, 512, -1, 1000};
    DevBuf<uint8_t> dW(m.bytes);
    DevBuf<int32_t> dIds(ids);
    DevBuf<float> out(ids.size() * embd);
    cuda::embed_rows(t, dW.get(), vocab, embd, dIds.get(), static_cast<int64_t>(ids.size()), out.get(), nullptr);
    const auto got = out.download();
    bool eq = true, nan_rows = true;
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < embd; ++c) {
        const float g = got[i * embd + c];
        if (ids[i] < 0 || ids[i] >= vocab) nan_rows &= std::isnan(g);
        else eq &= std::memcmp(&g, &m.deq[ids[i] * embd + c], 4) == 0;
      }
    report_exact("embed_rows", shape_str(t, vocab, embd, static_cast<int64_t>(ids.size())), eq);
    EXPECT_TRUE(nan_rows) << "out-of-range ids must give NaN rows";
  }
}

TEST(GpuMatmul, RejectsBadArguments) {
  FERRY_REQUIRE_GPU();
  DevBuf<uint8_t> w(144 * 4);
  DevBuf<float> x(1024), y(16);
  EXPECT_THROW(cuda::matvec(GgmlType::Q4_K, w.get(), 2, 300, x.get(), y.get(), nullptr), Error);  // cols % 256
  EXPECT_THROW(cuda::matvec(GgmlType::Q4_K, w.get() + 4, 2, 256, x.get(), y.get(), nullptr), Error);  // misaligned
  EXPECT_THROW(cuda::matvec(GgmlType::IQ2_XXS, w.get(), 2, 256, x.get(), y.get(), nullptr), Error);  // no kernel
  EXPECT_THROW(cuda::matvec(GgmlType::Q4_K, w.get(), 2, 256, x.get() + 1, y.get(), nullptr), Error);  // x alignment
}

#else
TEST(GpuMatmul, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
