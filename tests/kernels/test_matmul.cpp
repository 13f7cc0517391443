// matmul / matmul_q against double-precision references, over row counts that are not multiples
// of any tile, batch sizes 1, 2, 3, 7, 16, 33, strided inputs and outputs, 1 and 2 threads, and
// every ISA path.
#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <cmath>

#include "kernel_test_util.hpp"
#include "kernels/cpu/dot_kernels.hpp"
#include "runtime/core/error.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

// Bound on |x − deq(quantize_activation(x))| for one value, from the activation format:
// Q8_K: d/2 with d = amax/127 in f32; Q8_0: d/2 plus the fp16 rounding of d (≤ 127·d·2^-11);
// F16/BF16: half an ulp (2^-11 / 2^-8 relative); F32: exact.
std::vector<double> activation_error_bound(GgmlType w, const float* x, int64_t n) {
  std::vector<double> e(static_cast<size_t>(n), 0.0);
  const GgmlType vt = cpu::vec_dot_type(w);
  const int64_t bv = type_info(vt).block_values;
  for (int64_t b = 0; b < n / bv; ++b) {
    double amax = 0;
    for (int64_t j = 0; j < bv; ++j)
      amax = std::max(amax, std::fabs(static_cast<double>(x[b * bv + j])));
    for (int64_t j = 0; j < bv; ++j) {
      const double v = std::fabs(static_cast<double>(x[b * bv + j]));
      double bound = 0;
      switch (vt) {
        case GgmlType::Q8_K:
          bound = amax / 127 * 0.5;
          break;
        case GgmlType::Q8_0:
        case GgmlType::Q8_1:
          bound = amax / 127 * (0.5 + 127.0 / 2048);
          break;
        case GgmlType::F16:
          bound = v * std::ldexp(1.0, -11);
          break;
        case GgmlType::BF16:
          bound = v * std::ldexp(1.0, -8);
          break;
        default:
          break;
      }
      e[static_cast<size_t>(b * bv + j)] = bound * 1.001 + 1e-12;
    }
  }
  return e;
}

struct Problem {
  GgmlType t;
  int64_t rows, cols, n_batch, ldx, ldy;
  std::vector<uint8_t> W;  // (rows, row_bytes)
  std::vector<float> Wd;   // (rows, cols) dequantized
  std::vector<float> X;    // (n_batch, ldx)
};

Problem make_problem(std::mt19937& rng, GgmlType t, int64_t rows, int64_t cols, int64_t n_batch) {
  Problem p{t, rows, cols, n_batch, cols + 3, rows + 5, {}, {}, {}};
  const size_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  p.W.resize(rb * rows);
  p.Wd.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto w = weight_row(rng, t, cols);
    std::copy(w.begin(), w.end(), p.W.begin() + static_cast<ptrdiff_t>(r * rb));
    cpu::dequantize_row_ref(t, p.W.data() + r * rb, p.Wd.data() + r * cols, cols);
  }
  p.X = random_normal(rng, n_batch * p.ldx);
  return p;
}

// Per output element: (a) Σ deq(W)·deq(Xq) in double, with the float accumulation tolerance of a
// dot of cols terms, and (b) Σ deq(W)·X in double, with the rigorous activation-quantization
// bound Σ |deq(W)|·e on top. Computed once per problem, checked for every ISA / thread count.
struct Reference {
  std::vector<double> exact_q, tol_q, exact_f, tol_f;  // (n_batch, rows)
};

Reference reference(const Problem& p) {
  Reference ref;
  const GgmlType vt = cpu::vec_dot_type(p.t);
  std::vector<uint8_t> xq(row_bytes(vt, static_cast<uint64_t>(p.cols)));
  for (int64_t b = 0; b < p.n_batch; ++b) {
    const float* x = p.X.data() + b * p.ldx;
    cpu::quantize_activation(p.t, x, xq.data(), p.cols);
    const auto xd = dequantize(vt, xq.data(), p.cols);
    const auto err = activation_error_bound(p.t, x, p.cols);
    for (int64_t r = 0; r < p.rows; ++r) {
      const float* w = p.Wd.data() + r * p.cols;
      double exact_q = 0, mag = 0, exact_f = 0, act_bound = 0;
      for (int64_t c = 0; c < p.cols; ++c) {
        exact_q += static_cast<double>(w[c]) * xd[static_cast<size_t>(c)];
        mag += std::fabs(static_cast<double>(w[c]) * xd[static_cast<size_t>(c)]);
        exact_f += static_cast<double>(w[c]) * x[c];
        act_bound += std::fabs(static_cast<double>(w[c])) * err[static_cast<size_t>(c)];
      }
      // Q4_1/Q5_1: their min term uses the activation's fp16 block sum (kernel_test_util.hpp),
      // whose rounding (≤ 2^-11 relative) adds to the activation error bound.
      const size_t rb = row_bytes(p.t, static_cast<uint64_t>(p.cols));
      double min_mag;
      exact_q += q8_1_min_term_shift(p.t, p.W.data() + r * rb, xq.data(), p.cols, &min_mag);
      mag += min_mag;
      act_bound += min_mag * std::ldexp(1.0, -10);
      const double tol = 2 * (static_cast<double>(p.cols) / 8 + 64) * std::ldexp(1.0, -24) * mag;
      ref.exact_q.push_back(exact_q);
      ref.tol_q.push_back(tol);
      ref.exact_f.push_back(exact_f);
      ref.tol_f.push_back(act_bound + tol);
    }
  }
  return ref;
}

void check_result(const Problem& p, const Reference& ref, const std::vector<float>& Y,
                  const std::string& what) {
  for (int64_t b = 0; b < p.n_batch; ++b) {
    for (int64_t r = 0; r < p.rows; ++r) {
      const size_t i = static_cast<size_t>(b * p.rows + r);
      const double y = Y[static_cast<size_t>(b * p.ldy + r)];
      ASSERT_NEAR(y, ref.exact_q[i], ref.tol_q[i]) << what << " row " << r << " batch " << b;
      ASSERT_NEAR(y, ref.exact_f[i], ref.tol_f[i]) << what << " row " << r << " batch " << b;
    }
    for (int64_t r = p.rows; r < p.ldy; ++r)  // padding between output rows is left alone
      ASSERT_EQ(Y[static_cast<size_t>(b * p.ldy + r)], -777.f) << what << " padding";
  }
}

std::string describe(const Problem& p, cpu::Isa isa, int threads) {
  return std::string(type_name(p.t)) + " " + std::to_string(p.rows) + "x" + std::to_string(p.cols) +
         " batch " + std::to_string(p.n_batch) + " on " + cpu::isa_name(isa) + " threads " +
         std::to_string(threads);
}

}  // namespace

TEST(Matmul, MatchesDoubleReferenceAcrossBatchesThreadsAndIsas) {
  IsaGuard guard;
  std::mt19937 rng(31);
  struct Shape {
    int64_t rows, cols_blocks;
  };
  // 37 and 131 rows are not multiples of any tile or grain; 1 row is the degenerate case.
  const Shape shapes[] = {{1, 2}, {37, 3}, {131, 2}};
  for (GgmlType t : kWeightTypes) {
    const int64_t bv = block_values(t) == 1 ? 64 : block_values(t);
    for (const Shape& s : shapes) {
      for (int64_t n_batch : {1, 2, 3, 7, 16, 33}) {
        const Problem p =
            make_problem(rng, t, s.rows, s.cols_blocks * bv + (bv == 64 ? 5 : 0), n_batch);
        const Reference ref = reference(p);
        for (cpu::Isa isa : available_isas()) {
          cpu::set_isa(isa);
          for (int threads : {1, 2}) {
            std::vector<float> Y(static_cast<size_t>(n_batch * p.ldy), -777.f);
            tbb::task_arena arena(threads);
            arena.execute([&] {
              cpu::matmul(t, p.W.data(), p.rows, p.cols, p.X.data(), p.ldx, n_batch, Y.data(),
                          p.ldy);
            });
            check_result(p, ref, Y, describe(p, isa, threads));
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Large enough to take the parallel path (several tasks); the result must not depend on the
// thread count or on `parallel`.
TEST(Matmul, ParallelPathIsDeterministic) {
  IsaGuard guard;
  std::mt19937 rng(32);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16}) {
    for (int64_t n_batch : {1, 7}) {
      const Problem p = make_problem(rng, t, 613, 1024, n_batch);
      std::vector<float> serial(static_cast<size_t>(n_batch * p.ldy), -777.f);
      cpu::matmul(t, p.W.data(), p.rows, p.cols, p.X.data(), p.ldx, n_batch, serial.data(), p.ldy,
                  /*parallel=*/false);
      check_result(p, reference(p), serial, describe(p, cpu::active_isa(), 1));
      for (int threads : {1, 2}) {
        std::vector<float> Y(serial.size());
        tbb::task_arena arena(threads);
        arena.execute([&] {
          cpu::matmul(t, p.W.data(), p.rows, p.cols, p.X.data(), p.ldx, n_batch, Y.data(), p.ldy);
        });
        for (int64_t b = 0; b < n_batch; ++b)
          for (int64_t r = 0; r < p.rows; ++r)
            ASSERT_EQ(Y[static_cast<size_t>(b * p.ldy + r)],
                      serial[static_cast<size_t>(b * p.ldy + r)])
                << describe(p, cpu::active_isa(), threads) << " row " << r;
      }
    }
  }
}

// matmul_q with activations quantized by the caller (strided) gives the same numbers as matmul
// (dense = true); with dense = false (expert products) every row is the 1-row vec_dot (29 rows: no
// repacked matrix, 5 activation rows: no tiled product); with dense = true Q4_K's full 4-row
// groups take the grouped order (ggml's 4-row kernel) and IQ4_NL every row tinyBLAS's, which
// differ from vec_dot somewhere, the other types never.
TEST(Matmul, PreQuantizedActivationsMatchMatmul) {
  std::mt19937 rng(33);
  for (GgmlType t : kWeightTypes) {
    const int64_t cols = 2 * (block_values(t) == 1 ? 128 : block_values(t));
    const Problem p = make_problem(rng, t, 29, cols, 5);
    const GgmlType vt = cpu::vec_dot_type(t);
    const int64_t ldxq = static_cast<int64_t>(row_bytes(vt, static_cast<uint64_t>(cols))) + 16;
    std::vector<uint8_t> xq(static_cast<size_t>(ldxq * p.n_batch));
    for (int64_t b = 0; b < p.n_batch; ++b)
      cpu::quantize_activation(t, p.X.data() + b * p.ldx, xq.data() + b * ldxq, cols);
    std::vector<float> a(static_cast<size_t>(p.n_batch * p.ldy)), q(a.size());
    cpu::matmul(t, p.W.data(), p.rows, cols, p.X.data(), p.ldx, p.n_batch, a.data(), p.ldy);
    cpu::matmul_q(t, p.W.data(), p.rows, cols, xq.data(), ldxq, p.n_batch, q.data(), p.ldy, true,
                  true);
    EXPECT_EQ(a, q) << type_name(t);
    std::vector<float> e(a.size());
    cpu::matmul_q(t, p.W.data(), p.rows, cols, xq.data(), ldxq, p.n_batch, e.data(), p.ldy, true,
                  false);
    const size_t wrb = row_bytes(t, static_cast<uint64_t>(cols));
    const bool dense_order = t == GgmlType::Q4_K || t == GgmlType::IQ4_NL;
    int64_t differ = 0;
    for (int64_t b = 0; b < p.n_batch; ++b)
      for (int64_t r = 0; r < p.rows; ++r) {
        const size_t i = static_cast<size_t>(b * p.ldy + r);
        ASSERT_EQ(e[i], cpu::vec_dot(t, p.W.data() + r * wrb, xq.data() + b * ldxq, cols))
            << type_name(t);
        if (t != GgmlType::IQ4_NL && b >= p.n_batch - p.n_batch % 4) {
          ASSERT_EQ(a[i], e[i]) << type_name(t) << " tail row " << b;
        }
        differ += a[i] != e[i];
      }
    if (dense_order) {
      EXPECT_GT(differ, 0) << type_name(t) << ": the dense and 1-row orders never differed";
    } else {
      EXPECT_EQ(differ, 0) << type_name(t);
    }
  }
}

// Which order matmul_q gives each output (dot_kernels.hpp, ggml's kernel choice on x86): the
// repacked order for Q4_0/IQ4_NL/MXFP4 matrices with a multiple of 8 rows (dense and expert),
// else tinyBLAS's for dense IQ4_NL products of 2+ rows; the tiled order for Q5_K, Q6_K, Q2_K, Q3_K,
// IQ4_XS products of 8+ activation rows; Q4_K's 4-row groups in dense products; vec_dot otherwise.
TEST(Matmul, TakesTheOrderLlamaCppTakes) {
  using cpu::detail::DotOrder;
  std::mt19937 rng(35);
  const auto& scalar = cpu::detail::dot_kernels(cpu::Isa::scalar);
  auto expected_order = [](GgmlType t, int64_t rows, int64_t n_batch, bool dense, int64_t b) {
    switch (t) {
      case GgmlType::Q4_0:
      case GgmlType::MXFP4:
      case GgmlType::IQ4_NL:
        if (rows % 8 == 0) return DotOrder::repacked;
        return t == GgmlType::IQ4_NL && dense && n_batch >= 2 ? DotOrder::tinyblas : DotOrder::row;
      case GgmlType::Q5_K:
      case GgmlType::Q6_K:
      case GgmlType::Q2_K:
      case GgmlType::Q3_K:
      case GgmlType::IQ4_XS:
        return n_batch >= 8 ? DotOrder::tiled : DotOrder::row;
      case GgmlType::Q4_K:
        return dense && b < n_batch - n_batch % 4 ? DotOrder::group4 : DotOrder::row;
      default:
        return DotOrder::row;
    }
  };
  for (GgmlType t : kWeightTypes) {
    if (block_values(t) == 1) continue;
    const int64_t cols = 3 * block_values(t);
    const GgmlType vt = cpu::vec_dot_type(t);
    const auto xrb = static_cast<int64_t>(row_bytes(vt, static_cast<uint64_t>(cols)));
    const size_t wrb = row_bytes(t, static_cast<uint64_t>(cols));
    for (int64_t rows : {24, 29}) {
      const Problem p = make_problem(rng, t, rows, cols, 9);
      std::vector<uint8_t> xq(static_cast<size_t>(xrb * p.n_batch));
      for (int64_t b = 0; b < p.n_batch; ++b)
        cpu::quantize_activation(t, p.X.data() + b * p.ldx, xq.data() + b * xrb, cols);
      for (int64_t n_batch : {1, 3, 7, 8, 9})
        for (bool dense : {false, true}) {
          std::vector<float> y(static_cast<size_t>(n_batch * p.ldy));
          cpu::matmul_q(t, p.W.data(), rows, cols, xq.data(), xrb, n_batch, y.data(), p.ldy, false,
                        dense);
          for (int64_t b = 0; b < n_batch; ++b)
            for (int64_t r = 0; r < rows; ++r) {
              const DotOrder o = expected_order(t, rows, n_batch, dense, b);
              float want;
              cpu::detail::dot_fn(scalar, t, o)(cols, p.W.data() + r * wrb, xq.data() + b * xrb, 0,
                                                1, &want);
              ASSERT_EQ(y[static_cast<size_t>(b * p.ldy + r)], want)
                  << type_name(t) << " rows " << rows << " n_batch " << n_batch
                  << (dense ? " dense" : " expert") << " output (" << b << ", " << r << ") order "
                  << static_cast<int>(o);
            }
        }
    }
  }
}

// K-quant products of many activation rows take the lane-packed kernels where the ISA has them
// (AVX-512): every output of a dense Q4_K product still equals the scalar 4-row order (full groups
// of 4 activation rows) or vec_dot (the tail), every output of a Q4_K expert product vec_dot, every
// output of a Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS product the tiled order; at every ISA, serial and
// parallel, for weight row counts around the kernels' 4-row groups and activation row counts around
// their 16-row packs, with a strided input.
TEST(Matmul, KQuantManyRowsKeepTheirOrders) {
  using cpu::detail::DotOrder;
  std::mt19937 rng(36);
  const auto& scalar = cpu::detail::dot_kernels(cpu::Isa::scalar);
  const cpu::Isa saved = cpu::active_isa();
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::IQ4_XS})
    for (int64_t cols : {256, 768}) {
      const auto xrb =
          static_cast<int64_t>(row_bytes(GgmlType::Q8_K, static_cast<uint64_t>(cols))) + 9;
      const Problem p = make_problem(rng, t, 64, cols, 37);
      std::vector<uint8_t> xq(static_cast<size_t>(xrb * p.n_batch));
      for (int64_t b = 0; b < p.n_batch; ++b)
        cpu::quantize_activation(t, p.X.data() + b * p.ldx, xq.data() + b * xrb, cols);
      const size_t wrb = row_bytes(t, static_cast<uint64_t>(cols));
      for (cpu::Isa isa :
           {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512vnni}) {
        if (static_cast<int>(isa) > static_cast<int>(cpu::detected_isa())) continue;
        cpu::set_isa(isa);
        for (int64_t rows : {1, 3, 4, 5, 29, 64})
          for (int64_t n_batch : {8, 10, 11, 16, 20, 37})
            for (bool parallel : {false, true})
              for (bool dense : {true, false}) {
                std::vector<float> y(static_cast<size_t>(n_batch * p.ldy), std::nanf(""));
                cpu::matmul_q(t, p.W.data(), rows, cols, xq.data(), xrb, n_batch, y.data(), p.ldy,
                              parallel, dense);
                for (int64_t b = 0; b < n_batch; ++b)
                  for (int64_t r = 0; r < rows; ++r) {
                    const DotOrder o = t != GgmlType::Q4_K                  ? DotOrder::tiled
                                       : dense && b < n_batch - n_batch % 4 ? DotOrder::group4
                                                                            : DotOrder::row;
                    float want;
                    cpu::detail::dot_fn(scalar, t, o)(cols, p.W.data() + r * wrb,
                                                      xq.data() + b * xrb, 0, 1, &want);
                    ASSERT_EQ(y[static_cast<size_t>(b * p.ldy + r)], want)
                        << type_name(t) << " " << cpu::isa_name(isa) << " cols " << cols << " rows "
                        << rows << " n_batch " << n_batch << (parallel ? " parallel" : " serial")
                        << (dense ? " dense" : " expert") << " output (" << b << ", " << r << ")";
                  }
              }
      }
    }
  cpu::set_isa(saved);
}

TEST(Matmul, MatvecWrapper) {
  std::mt19937 rng(34);
  const Problem p = make_problem(rng, GgmlType::Q6_K, 19, 512, 1);
  std::vector<float> y(19), Y(static_cast<size_t>(p.ldy));
  cpu::matvec(GgmlType::Q6_K, p.W.data(), 19, 512, p.X.data(), y.data());
  cpu::matmul(GgmlType::Q6_K, p.W.data(), 19, 512, p.X.data(), p.ldx, 1, Y.data(), p.ldy);
  for (int r = 0; r < 19; ++r) EXPECT_EQ(y[r], Y[r]);
}

TEST(Matmul, RejectsBadArguments) {
  std::vector<uint8_t> W(144 * 4);
  std::vector<float> X(1024), Y(1024);
  auto expect_kind = [](ErrorKind kind, auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
    }
  };
  expect_kind(ErrorKind::invalid_arg, [&] {  // cols not a multiple of 256
    cpu::matmul(GgmlType::Q4_K, W.data(), 2, 300, X.data(), 300, 1, Y.data(), 2);
  });
  expect_kind(ErrorKind::unsupported, [&] {
    cpu::matmul(GgmlType::IQ2_XXS, W.data(), 2, 256, X.data(), 256, 1, Y.data(), 2);
  });
  expect_kind(ErrorKind::invalid_arg, [&] {  // output stride smaller than rows
    cpu::matmul(GgmlType::Q4_K, W.data(), 4, 256, X.data(), 256, 2, Y.data(), 3);
  });
  expect_kind(ErrorKind::invalid_arg, [&] {  // input stride smaller than cols
    cpu::matmul(GgmlType::Q4_K, W.data(), 4, 256, X.data(), 200, 2, Y.data(), 4);
  });
  // empty problems are fine
  EXPECT_NO_THROW(cpu::matmul(GgmlType::Q4_K, W.data(), 0, 256, X.data(), 256, 1, Y.data(), 0));
  EXPECT_NO_THROW(cpu::matmul(GgmlType::Q4_K, W.data(), 4, 256, X.data(), 256, 0, Y.data(), 4));
}
