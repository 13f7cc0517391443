// Oracle for Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 against the venv's ggml
// (ggml_oracle.hpp), bit for bit on random valid blocks:
//   * the reference dequantizers against dequantize_row_*;
//   * the Q8_1 activation quantizer against ggml-cpu's quantize_row_q8_1;
//   * vec_dot_ref and every ISA's vec_dot against ggml_vec_dot_* (odd block counts included);
//   * the repacked order of Q4_0 / IQ4_NL / MXFP4 against ggml's 8x8 gemv and gemm on interleaved
//     copies, and Ferry's matmul of an 8-row matrix (which takes that order) against them;
//   * Ferry's matmul and matmul_q against ggml's own mul_mat / mul_mat_id graphs (plain buffers, so
//     not repacked), which pick vec_dot, llamafile's tinyBLAS or the tiled kernel by shape.
#include <gtest/gtest.h>

#include "ggml_oracle.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cpu/dot_kernels.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

struct NewType {
  GgmlType t;
  const char* dequantize;
  const char* vec_dot;
};
constexpr NewType kNewTypes[] = {
    {GgmlType::Q4_0, "dequantize_row_q4_0", "ggml_vec_dot_q4_0_q8_0"},
    {GgmlType::Q4_1, "dequantize_row_q4_1", "ggml_vec_dot_q4_1_q8_1"},
    {GgmlType::Q5_0, "dequantize_row_q5_0", "ggml_vec_dot_q5_0_q8_0"},
    {GgmlType::Q5_1, "dequantize_row_q5_1", "ggml_vec_dot_q5_1_q8_1"},
    {GgmlType::IQ4_NL, "dequantize_row_iq4_nl", "ggml_vec_dot_iq4_nl_q8_0"},
    {GgmlType::MXFP4, "dequantize_row_mxfp4", "ggml_vec_dot_mxfp4_q8_0"},
    {GgmlType::Q2_K, "dequantize_row_q2_K", "ggml_vec_dot_q2_K_q8_K"},
    {GgmlType::Q3_K, "dequantize_row_q3_K", "ggml_vec_dot_q3_K_q8_K"},
    {GgmlType::IQ4_XS, "dequantize_row_iq4_xs", "ggml_vec_dot_iq4_xs_q8_K"},
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::vector<uint8_t> quantized(GgmlType w, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(row_bytes(cpu::vec_dot_type(w), static_cast<uint64_t>(n)));
  cpu::quantize_activation(w, x.data(), q.data(), n);
  return q;
}

}  // namespace

TEST(GgmlOracleTypes, DequantizationIsBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(61);
  for (const NewType& nt : kNewTypes) {
    const int64_t n = 256 * 8;
    for (int rep = 0; rep < 4; ++rep) {
      const auto q = random_blocks(rng, nt.t, n, /*full_range=*/true);
      std::vector<float> theirs(static_cast<size_t>(n));
      Ggml::get().sym<DequantizeFn>(nt.dequantize)(q.data(), theirs.data(), n);
      EXPECT_TRUE(same_bits(dequantize(nt.t, q.data(), n), theirs)) << nt.dequantize;
    }
  }
}

TEST(GgmlOracleTypes, Q8_1ActivationQuantizerIsBitExact) {
  REQUIRE_GGML();
  std::mt19937 rng(62);
  const int64_t n = 32 * 64;
  for (float sigma : {0.01f, 1.f, 300.f}) {
    auto x = random_normal(rng, n, sigma);
    for (int64_t i = 0; i < n; i += 97) x[static_cast<size_t>(i)] = 0.5f * std::round(x[static_cast<size_t>(i)] * 2);
    std::fill_n(x.begin() + 64, 32, 0.f);  // an all-zero block: d = 0, s = 0
    std::vector<uint8_t> theirs(row_bytes(GgmlType::Q8_1, n));
    Ggml::get().sym<QuantizeFn>("quantize_row_q8_1")(x.data(), theirs.data(), n);
    EXPECT_EQ(quantized(GgmlType::Q4_1, x), theirs) << "sigma " << sigma;
  }
}

// ggml_vec_dot_* (the x86 AVX2 kernels) against vec_dot_ref and vec_dot on every ISA path.
TEST(GgmlOracleTypes, DotProductsAreBitExact) {
  REQUIRE_GGML();
  IsaGuard guard;
  std::mt19937 rng(63);
  for (const NewType& nt : kNewTypes) {
    const auto fn = Ggml::get().sym<GgmlDotFn>(nt.vec_dot);
    ASSERT_NE(fn, nullptr);
    const int64_t bv = block_values(nt.t);
    for (int64_t blocks : {1, 2, 3, 7, 8, 17}) {
      const int64_t n = blocks * bv;
      for (int rep = 0; rep < 6; ++rep) {
        const auto w = random_blocks(rng, nt.t, n);
        const auto xq = quantized(nt.t, random_normal(rng, n, rep % 2 ? 3.f : 0.2f));
        float theirs = 0;
        fn(static_cast<int>(n), &theirs, 0, w.data(), 0, xq.data(), 0, 1);
        ASSERT_EQ(cpu::vec_dot_ref(nt.t, w.data(), xq.data(), n), theirs) << nt.vec_dot << " n=" << n << " (scalar)";
        for (cpu::Isa isa : available_isas()) {
          cpu::set_isa(isa);
          ASSERT_EQ(cpu::vec_dot(nt.t, w.data(), xq.data(), n), theirs) << nt.vec_dot << " n=" << n << " on "
                                                                       << cpu::isa_name(isa);
        }
      }
    }
  }
}

// ---- Repacked Q4_0 / IQ4_NL / MXFP4 (ggml-cpu repack.cpp, 8x8 with 8-byte interleave).
namespace {

// Eight rows' block b as ggml's block_*x8: the 8 scales (fp16 d or E8M0 e), then for i < 16 the
// 8 bytes qs[8·(i/8) ..] of row i % 8, XORed with 0x88 for Q4_0 (levels become signed nibbles).
std::vector<uint8_t> interleave_x8(GgmlType t, const uint8_t* rows, size_t rb, int64_t nb) {
  const size_t scale_bytes = t == GgmlType::MXFP4 ? 1 : 2;
  const size_t bb = type_info(t).block_bytes;
  const size_t out_bb = 8 * scale_bytes + 128;
  std::vector<uint8_t> out(static_cast<size_t>(nb) * out_bb);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = out.data() + b * out_bb;
    for (int r = 0; r < 8; ++r) std::memcpy(o + scale_bytes * r, rows + r * rb + b * bb, scale_bytes);
    for (int i = 0; i < 16; ++i) {
      const uint8_t* qs = rows + (i % 8) * rb + b * bb + scale_bytes + 8 * (i / 8);
      for (int k = 0; k < 8; ++k) o[8 * scale_bytes + 8 * i + k] = t == GgmlType::Q4_0 ? qs[k] ^ 0x88 : qs[k];
    }
  }
  return out;
}

struct Repacked {
  GgmlType t;
  const char* gemv;
  const char* gemm;
};
constexpr Repacked kRepacked[] = {
    {GgmlType::Q4_0, "ggml_gemv_q4_0_8x8_q8_0", "ggml_gemm_q4_0_8x8_q8_0"},
    {GgmlType::IQ4_NL, "ggml_gemv_iq4_nl_8x8_q8_0", "ggml_gemm_iq4_nl_8x8_q8_0"},
    {GgmlType::MXFP4, "ggml_gemv_mxfp4_8x8_q8_0", "ggml_gemm_mxfp4_8x8_q8_0"},
};

using GemvFn = void (*)(int n, float* s, size_t bs, const void* vx, const void* vy, int nr, int nc);
using QuantMatFn = void (*)(const float* x, void* vy, int64_t k);

}  // namespace

// gemv (1 activation row) and gemm (4 rows, quantized together by ggml_quantize_mat_q8_0_4x8)
// against the repacked order on every ISA, and Ferry's matmul of the 8-row matrix (1 and 4 rows).
TEST(GgmlOracleTypes, RepackedKernelsAreBitExact) {
  REQUIRE_GGML();
  IsaGuard guard;
  std::mt19937 rng(64);
  const auto quant4 = Ggml::get().sym<QuantMatFn>("ggml_quantize_mat_q8_0_4x8");
  ASSERT_NE(quant4, nullptr);
  for (const Repacked& rp : kRepacked) {
    const auto gemv = Ggml::get().sym<GemvFn>(rp.gemv);
    const auto gemm = Ggml::get().sym<GemvFn>(rp.gemm);
    ASSERT_TRUE(gemv && gemm);
    for (int64_t n : {32, 96, 1024}) {
      const size_t rb = row_bytes(rp.t, static_cast<uint64_t>(n));
      const auto W = random_blocks(rng, rp.t, 8 * n);  // 8 rows of n
      const auto packed = interleave_x8(rp.t, W.data(), rb, n / 32);
      const auto X = random_normal(rng, 4 * n, 2.f);  // (4, n)
      const size_t xb = row_bytes(GgmlType::Q8_0, static_cast<uint64_t>(n));
      std::vector<uint8_t> xq(4 * xb);
      for (int a = 0; a < 4; ++a) cpu::quantize_activation(rp.t, X.data() + a * n, xq.data() + a * xb, n);
      float v[8], m[4 * 8];
      gemv(static_cast<int>(n), v, 8, packed.data(), xq.data(), 1, 8);
      std::vector<uint8_t> x4(4 * xb);  // block_q8_0x4
      quant4(X.data(), x4.data(), n);
      gemm(static_cast<int>(n), m, 8, packed.data(), x4.data(), 4, 8);
      for (cpu::Isa isa : available_isas()) {
        cpu::set_isa(isa);
        const auto f = cpu::detail::dot_fn(cpu::detail::dot_kernels(isa), rp.t, cpu::detail::DotOrder::repacked);
        for (int r = 0; r < 8; ++r) {
          float ours[4];
          f(n, W.data() + r * rb, xq.data(), xb, 4, ours);
          ASSERT_EQ(ours[0], v[r]) << rp.gemv << " n=" << n << " row " << r << " on " << cpu::isa_name(isa);
          for (int a = 0; a < 4; ++a)
            ASSERT_EQ(ours[a], m[a * 8 + r]) << rp.gemm << " n=" << n << " row " << r << " activation " << a << " on "
                                             << cpu::isa_name(isa);
        }
        std::vector<float> y1(8), y4(4 * 8);
        cpu::matmul(rp.t, W.data(), 8, n, X.data(), n, 1, y1.data(), 8);
        cpu::matmul(rp.t, W.data(), 8, n, X.data(), n, 4, y4.data(), 8);
        EXPECT_TRUE(same_bits(y1, std::vector<float>(v, v + 8))) << rp.gemv << " via matmul on " << cpu::isa_name(isa);
        EXPECT_TRUE(same_bits(y4, std::vector<float>(m, m + 32))) << rp.gemm << " via matmul on " << cpu::isa_name(isa);
      }
    }
  }
}

// ---- ggml's own mul_mat / mul_mat_id graphs on plain (not repacked) tensors.
namespace {

struct InitParams {  // struct ggml_init_params
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

class Graph {
 public:
  Graph() {
    auto& g = Ggml::get();
    ctx_ = g.sym<void* (*)(InitParams)>("ggml_init")(InitParams{size_t{64} << 20, nullptr, false});
  }
  ~Graph() {
    if (ctx_) Ggml::get().sym<void (*)(void*)>("ggml_free")(ctx_);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void* tensor(GgmlType t, std::initializer_list<int64_t> ne, const void* data, size_t bytes) {
    void* x = ne.size() == 2
                  ? Ggml::get().sym<void* (*)(void*, int, int64_t, int64_t)>("ggml_new_tensor_2d")(
                        ctx_, static_cast<int>(t), ne.begin()[0], ne.begin()[1])
                  : Ggml::get().sym<void* (*)(void*, int, int64_t, int64_t, int64_t)>("ggml_new_tensor_3d")(
                        ctx_, static_cast<int>(t), ne.begin()[0], ne.begin()[1], ne.begin()[2]);
    EXPECT_EQ(Ggml::get().sym<size_t (*)(const void*)>("ggml_nbytes")(x), bytes);
    std::memcpy(data_of(x), data, bytes);
    return x;
  }
  void* mul_mat(void* a, void* b) { return Ggml::get().sym<void* (*)(void*, void*, void*)>("ggml_mul_mat")(ctx_, a, b); }
  void* mul_mat_id(void* as, void* b, void* ids) {
    return Ggml::get().sym<void* (*)(void*, void*, void*, void*)>("ggml_mul_mat_id")(ctx_, as, b, ids);
  }
  // Computes `out` with one thread and returns its n floats.
  std::vector<float> compute(void* out, size_t n) {
    void* gf = Ggml::get().sym<void* (*)(void*)>("ggml_new_graph")(ctx_);
    Ggml::get().sym<void (*)(void*, void*)>("ggml_build_forward_expand")(gf, out);
    EXPECT_EQ(Ggml::get().sym<int (*)(void*, void*, int)>("ggml_graph_compute_with_ctx")(ctx_, gf, 1), 0);
    const auto* p = static_cast<const float*>(data_of(out));
    return std::vector<float>(p, p + n);
  }

 private:
  static void* data_of(void* t) { return Ggml::get().sym<void* (*)(const void*)>("ggml_get_data")(t); }
  void* ctx_ = nullptr;
};

}  // namespace

// Dense products: Ferry's matmul against ggml_mul_mat for 1..17 activation rows (vec_dot below 2
// rows, tinyBLAS for dense Q4_0/Q5_0/IQ4_NL, the tiled kernel for 8+ rows of Q2_K/Q3_K/IQ4_XS),
// on a 20-row matrix (not a multiple of 8: Ferry does not take the repacked order either).
TEST(GgmlOracleTypes, DenseMatmulMatchesGgmlGraphs) {
  REQUIRE_GGML();
  IsaGuard guard;
  std::mt19937 rng(65);
  const int64_t rows = 20;
  for (const NewType& nt : kNewTypes) {
    for (int64_t cols : {768, 224}) {
      if (cols % block_values(nt.t) != 0) continue;
      const auto W = random_blocks(rng, nt.t, rows * cols);
      for (int64_t n_batch : {1, 2, 3, 4, 5, 8, 9, 17}) {
        const auto X = random_normal(rng, n_batch * cols, 1.5f);
        Graph g;
        void* a = g.tensor(nt.t, {cols, rows}, W.data(), W.size());
        void* b = g.tensor(GgmlType::F32, {cols, n_batch}, X.data(), X.size() * 4);
        const auto theirs = g.compute(g.mul_mat(a, b), static_cast<size_t>(rows * n_batch));
        for (cpu::Isa isa : available_isas()) {
          cpu::set_isa(isa);
          std::vector<float> ours(theirs.size());
          cpu::matmul(nt.t, W.data(), rows, cols, X.data(), cols, n_batch, ours.data(), rows);
          for (size_t i = 0; i < ours.size(); ++i)
            ASSERT_EQ(ours[i], theirs[i]) << type_name(nt.t) << " cols " << cols << " n_batch " << n_batch
                                          << " output (" << i / rows << ", " << i % rows << ") on " << cpu::isa_name(isa);
        }
      }
    }
  }
}

// Expert products: matmul_q (dense = false) per expert against ggml_mul_mat_id with 2 experts, all
// tokens routed to both (so each expert gets n_tokens rows: vec_dot, or the tiled kernel from 8).
TEST(GgmlOracleTypes, ExpertMatmulMatchesGgmlGraphs) {
  REQUIRE_GGML();
  IsaGuard guard;
  std::mt19937 rng(66);
  const int64_t rows = 20, n_expert = 2, cols = 512;
  for (const NewType& nt : kNewTypes) {
    const size_t rb = row_bytes(nt.t, static_cast<uint64_t>(cols));
    const auto W = random_blocks(rng, nt.t, n_expert * rows * cols);  // (n_expert, rows, cols)
    for (int64_t n_tokens : {1, 3, 8, 11}) {
      const auto X = random_normal(rng, n_tokens * cols);  // (n_tokens, cols), one row for both slots
      std::vector<float> Xb(static_cast<size_t>(n_tokens * n_expert * cols));
      std::vector<int32_t> ids(static_cast<size_t>(n_tokens * n_expert));
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t s = 0; s < n_expert; ++s) {
          std::copy_n(X.data() + t * cols, cols, Xb.data() + (t * n_expert + s) * cols);
          ids[static_cast<size_t>(t * n_expert + s)] = static_cast<int32_t>((s + t) % n_expert);
        }
      Graph g;
      void* as = g.tensor(nt.t, {cols, rows, n_expert}, W.data(), W.size());
      void* b = g.tensor(GgmlType::F32, {cols, n_expert, n_tokens}, Xb.data(), Xb.size() * 4);
      void* id = g.tensor(GgmlType::I32, {n_expert, n_tokens}, ids.data(), ids.size() * 4);
      const auto theirs = g.compute(g.mul_mat_id(as, b, id), static_cast<size_t>(rows * n_expert * n_tokens));
      const GgmlType vt = cpu::vec_dot_type(nt.t);
      const auto xrb = static_cast<int64_t>(row_bytes(vt, static_cast<uint64_t>(cols)));
      std::vector<uint8_t> xq(static_cast<size_t>(xrb * n_tokens));
      for (int64_t t = 0; t < n_tokens; ++t) cpu::quantize_activation(nt.t, X.data() + t * cols, xq.data() + t * xrb, cols);
      for (cpu::Isa isa : available_isas()) {
        cpu::set_isa(isa);
        for (int64_t e = 0; e < n_expert; ++e) {
          std::vector<float> y(static_cast<size_t>(n_tokens * rows));
          cpu::matmul_q(nt.t, W.data() + e * rows * rb, rows, cols, xq.data(), xrb, n_tokens, y.data(), rows, false, false);
          for (int64_t t = 0; t < n_tokens; ++t) {
            const int64_t slot = (e - t % n_expert + n_expert) % n_expert;  // ids[t][slot] == e
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], theirs[static_cast<size_t>((t * n_expert + slot) * rows + r)])
                  << type_name(nt.t) << " expert " << e << " token " << t << " row " << r << " n_tokens " << n_tokens
                  << " on " << cpu::isa_name(isa);
          }
        }
      }
    }
  }
}
