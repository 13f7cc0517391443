// Grouped MoE expert kernels (gate/up + SwiGLU, weighted and per-slot down, moe_sum, the fused
// down + sum, the prefill grouped by expert, row scatter)
// vs a double-precision reference (and the CPU weighted sum, bit for bit).
// Experts live at scattered offsets of one pool and are reached through the pointer table.
#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "runtime/moe/group.hpp"
#include "runtime/core/types.hpp"
#include "tests/gpu/gpu_test_util.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

struct Expert {
  std::vector<float> gate, up, down;  // dequantized (n_ff, n_embd), (n_ff, n_embd), (n_embd, n_ff)
  size_t off_gate = 0, off_up = 0, off_down = 0;  // byte offsets in the pool
};

void quantize_into(GgmlType t, const std::vector<float>& src, int64_t rows, int64_t cols, uint32_t seed,
                   std::vector<uint8_t>& pool, size_t off, std::vector<float>& deq) {
  const auto q = quantize_rows(t, src, rows, cols, seed);
  std::copy(q.begin(), q.end(), pool.begin() + static_cast<std::ptrdiff_t>(off));
  deq = dequantize_rows(t, q.data(), rows, cols);
}

// Fills y_slots before a per-slot kernel: rows it must not write still hold it afterwards.
constexpr float kSentinel = -12345.5f;

// The rows p (of n_embd values) of v whose ids[p] ≥ 0 (computed = true) or < 0, concatenated.
template <typename T>
std::vector<T> rows_where(const std::vector<T>& v, const std::vector<int32_t>& ids, int64_t n_embd,
                          bool computed) {
  std::vector<T> out;
  for (size_t p = 0; p < ids.size(); ++p)
    if ((ids[p] >= 0) == computed)
      out.insert(out.end(), v.begin() + p * n_embd, v.begin() + (p + 1) * n_embd);
  return out;
}

bool all_sentinel(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](float f) { return std::memcmp(&f, &kSentinel, sizeof f) == 0; });
}

void run_case(GgmlType t_gu, GgmlType t_down, int64_t n_embd, int64_t n_ff, int64_t n_tokens, int k) {
  const int n_experts = 6;
  const uint64_t gu_bytes = row_bytes(t_gu, n_embd) * n_ff, d_bytes = row_bytes(t_down, n_ff) * n_embd;
  // Pool layout with gaps and a shuffled order, 256-byte aligned pieces.
  auto align = [](size_t v) { return (v + 255) / 256 * 256; };
  std::vector<Expert> ex(n_experts);
  size_t off = 4096;
  for (int e = n_experts - 1; e >= 0; --e) {
    ex[e].off_down = off;
    off = align(off + d_bytes) + 512;
    ex[e].off_gate = off;
    off = align(off + gu_bytes) + 256;
    ex[e].off_up = off;
    off = align(off + gu_bytes);
  }
  std::vector<uint8_t> pool(off);
  for (int e = 0; e < n_experts; ++e) {
    quantize_into(t_gu, random_floats(n_ff * n_embd, 100 + e), n_ff, n_embd, 100 + e, pool, ex[e].off_gate, ex[e].gate);
    quantize_into(t_gu, random_floats(n_ff * n_embd, 200 + e), n_ff, n_embd, 200 + e, pool, ex[e].off_up, ex[e].up);
    quantize_into(t_down, random_floats(n_embd * n_ff, 300 + e), n_embd, n_ff, 300 + e, pool, ex[e].off_down,
                  ex[e].down);
  }
  DevBuf<uint8_t> dpool(pool);
  std::vector<cuda::ExpertPtrs> table(n_experts);
  for (int e = 0; e < n_experts; ++e)
    table[e] = {dpool.get() + ex[e].off_gate, dpool.get() + ex[e].off_up, dpool.get() + ex[e].off_down};
  DevBuf<uint8_t> dtable(n_experts * sizeof(cuda::ExpertPtrs));
  FERRY_CUDA_CHECK(cudaMemcpy(dtable.get(), table.data(), n_experts * sizeof(cuda::ExpertPtrs), cudaMemcpyHostToDevice));

  std::mt19937 rng(7);
  std::vector<int32_t> ids(n_tokens * k);
  std::vector<float> w(n_tokens * k);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = static_cast<int32_t>((t * 5 + j * 7 + rng() % 2) % n_experts);
      w[t * k + j] = 0.1f + 0.2f * static_cast<float>(j);
    }
  ids[1] = -1;  // a slot computed elsewhere (e.g. on the CPU)
  if (n_tokens * k > 3) ids[n_tokens * k - 2] = -1;
  const auto x = random_floats(n_tokens * n_embd, 400, -1.5f, 1.5f);
  const auto y0 = random_floats(n_tokens * n_embd, 401);

  // Reference.
  std::vector<double> href(n_tokens * k * n_ff, 0.0), yref(n_tokens * n_embd, 0.0);
  std::vector<double> yslot(n_tokens * k * n_embd, 0.0);  // (n_tokens, k, n_embd) unweighted
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = ids[t * k + j];
      if (e < 0) continue;
      for (int64_t r = 0; r < n_ff; ++r) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < n_embd; ++c) {
          g += double(ex[e].gate[r * n_embd + c]) * x[t * n_embd + c];
          u += double(ex[e].up[r * n_embd + c]) * x[t * n_embd + c];
        }
        href[(t * k + j) * n_ff + r] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t r = 0; r < n_embd; ++r) {
        double d = 0;
        for (int64_t c = 0; c < n_ff; ++c) d += double(ex[e].down[r * n_ff + c]) * href[(t * k + j) * n_ff + c];
        yslot[(t * k + j) * n_embd + r] = d;
        yref[t * n_embd + r] += w[t * k + j] * d;
      }
    }

  DevBuf<int32_t> dids(ids);
  DevBuf<float> dw(w), dx(x), dh(n_tokens * k * n_ff), dy(y0);
  const auto* tab = reinterpret_cast<const cuda::ExpertPtrs*>(dtable.get());
  cuda::moe_gate_up_swiglu(t_gu, tab, dids.get(), n_tokens, k, n_embd, n_ff, dx.get(), dh.get(), nullptr);
  const std::string shape = std::string(type_name(t_gu)) + "/" + std::string(type_name(t_down)) + " embd=" +
                            std::to_string(n_embd) + " ff=" + std::to_string(n_ff) + " tokens=" +
                            std::to_string(n_tokens) + " k=" + std::to_string(k);
  report("moe_gate_up_swiglu", shape, nmse(href, dh.download()), 1e-9);
  // The weighted step as every executor composes it: per-slot down, then the slot-order sum (rows
  // of ids < 0 zero here, so they add nothing).
  {
    DevBuf<float> dyz(std::vector<float>(n_tokens * k * n_embd, 0.0f));
    cuda::moe_down_slots(t_down, tab, dids.get(), n_tokens, k, n_embd, n_ff, dh.get(), dyz.get(), nullptr);
    cuda::moe_sum(dyz.get(), dw.get(), n_tokens, k, n_embd, dy.get(), nullptr);
    const auto composed = dy.download();
    report("moe_down_slots + moe_sum", shape, nmse(yref, composed), 1e-9);
    // The resident executor's one launch (ids < 0 add 0 there, as the zero rows do here).
    DevBuf<float> dfused(y0);
    cuda::moe_down_sum(t_down, tab, dids.get(), dw.get(), n_tokens, k, n_embd, n_ff, dh.get(), dfused.get(), nullptr);
    const auto fused = dfused.download();
    report_exact("moe_down_sum == moe_down_slots + moe_sum", shape,
                 std::memcmp(fused.data(), composed.data(), composed.size() * sizeof(float)) == 0);
    // The same step grouped by expert (a prompt batch of the resident executor): the same bits,
    // out and the h rows of every computed slot (slots of ids < 0 keep their zero y rows).
    {
      const size_t scratch_bytes = cuda::moe_grouped_scratch_bytes(n_tokens * k, n_experts);
      DevBuf<uint8_t> scratch(scratch_bytes);
      DevBuf<float> gh(n_tokens * k * n_ff), gys(std::vector<float>(n_tokens * k * n_embd, 0.0f)), gout(y0);
      cuda::moe_grouped_sum(t_gu, t_down, tab, n_experts, dids.get(), dw.get(), n_tokens, k, n_embd, n_ff, dx.get(),
                            gh.get(), gys.get(), gout.get(), scratch.get(), scratch_bytes, nullptr);
      const auto grouped = gout.download();
      report_exact("moe_grouped_sum == moe_down_slots + moe_sum", shape,
                   std::memcmp(grouped.data(), composed.data(), composed.size() * sizeof(float)) == 0);
      report_exact("moe_grouped_sum h == moe_gate_up_swiglu h", shape,
                   rows_where(gh.download(), ids, n_ff, true) == rows_where(dh.download(), ids, n_ff, true));
    }
    // With a shared expert's down projection in the same launch (the resident executor's decode):
    // the routed sum unchanged, the shared rows those of the dense matvec per token.
    const int64_t ff_sh = 2 * n_ff;
    std::vector<uint8_t> sh_pool(static_cast<size_t>(row_bytes(t_down, ff_sh) * n_embd));
    std::vector<float> sh_dense;
    quantize_into(t_down, random_floats(n_embd * ff_sh, 500), n_embd, ff_sh, 500, sh_pool, 0, sh_dense);
    DevBuf<uint8_t> dsh_w(sh_pool);
    DevBuf<float> dsh_h(random_floats(n_tokens * ff_sh, 501, -1.f, 1.f)), dsh_out(y0), dsh_ref(y0), dboth(y0);
    const cuda::SharedDown sh{dsh_w.get(), dsh_h.get(), ff_sh, dsh_out.get()};
    cuda::moe_down_sum(t_down, tab, dids.get(), dw.get(), n_tokens, k, n_embd, n_ff, dh.get(), dboth.get(), nullptr,
                       &sh);
    for (int64_t t = 0; t < n_tokens; ++t)
      cuda::matvec(t_down, dsh_w.get(), n_embd, ff_sh, dsh_h.get() + t * ff_sh, dsh_ref.get() + t * n_embd, nullptr);
    const auto both = dboth.download(), sh_got = dsh_out.download(), sh_ref = dsh_ref.download();
    report_exact("moe_down_sum with a shared down: the routed sum unchanged", shape,
                 std::memcmp(both.data(), fused.data(), fused.size() * sizeof(float)) == 0);
    report_exact("moe_down_sum with a shared down == matvec per token", shape,
                 std::memcmp(sh_got.data(), sh_ref.data(), sh_ref.size() * sizeof(float)) == 0);
  }

  // Per-slot outputs (the offload device flow): unweighted rows; rows of ids < 0 untouched.
  const std::vector<float> sentinel(n_tokens * k * n_embd, kSentinel);
  DevBuf<float> dys(sentinel);
  cuda::moe_down_slots(t_down, tab, dids.get(), n_tokens, k, n_embd, n_ff, dh.get(), dys.get(),
                       nullptr);
  const auto ys = dys.download();
  report("moe_down_slots", shape,
         nmse(rows_where(yslot, ids, n_embd, true), rows_where(ys, ids, n_embd, true)), 1e-9);
  report_exact("moe_down_slots ids<0 untouched", shape,
               all_sentinel(rows_where(ys, ids, n_embd, false)));

  // A decode step with its slots by value in the launch: the table path's bits.
  if (n_tokens == 1 && k <= cuda::DecodeSlots::kMaxSlots) {
    cuda::DecodeSlots slots{};
    for (int j = 0; j < k; ++j)
      if (ids[j] >= 0) slots.w[j] = table[ids[j]];
    DevBuf<float> dyd(sentinel), dhd(k * n_ff);
    cuda::moe_decode_slots(t_gu, t_down, slots, k, n_embd, n_ff, dx.get(), dhd.get(), dyd.get(),
                           nullptr);
    const auto yd = dyd.download();
    report_exact("moe_decode_slots == moe_gate_up_swiglu + moe_down_slots", shape,
                 std::memcmp(yd.data(), ys.data(), ys.size() * sizeof(float)) == 0);
  }

  // One expert over its own (token, slot) pairs (a streamed prefill expert) must give the bits of
  // the grouped kernels with every other slot masked out.
  const int32_t e0 = ids[0] >= 0 ? ids[0] : ids[k - 1 >= 1 ? k - 1 : 0];
  if (e0 < 0) return;
  // This routing may name an expert twice in one token (6 experts, k up to 8); real top-k does
  // not, and moe_expert_pairs_slots requires distinct tokens: keep each token's first e0 only.
  std::vector<int32_t> masked(ids.size(), -1), pairs;
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int j = 0; j < k; ++j)
      if (ids[t * k + j] == e0) {
        masked[t * k + j] = e0;
        pairs.push_back(static_cast<int32_t>(t * k + j));
        break;
      }
  DevBuf<int32_t> dmasked(masked), dpairs(pairs);
  DevBuf<float> dh_pairs(pairs.size() * n_ff);
  cuda::moe_gate_up_swiglu(t_gu, tab, dmasked.get(), n_tokens, k, n_embd, n_ff, dx.get(), dh.get(), nullptr);

  // Unweighted rows at the pairs (the grouped per-slot kernel's bits with the masked ids), every
  // other row untouched.
  DevBuf<float> dys_ref(sentinel), dys_pairs(sentinel);
  cuda::moe_down_slots(t_down, tab, dmasked.get(), n_tokens, k, n_embd, n_ff, dh.get(),
                       dys_ref.get(), nullptr);
  cuda::moe_expert_pairs_slots(t_gu, t_down, tab + e0, dpairs.get(),
                               static_cast<int64_t>(pairs.size()), k, n_embd, n_ff, dx.get(),
                               dh_pairs.get(), dys_pairs.get(), nullptr);
  const auto c = dys_ref.download(), p = dys_pairs.download();
  const std::string pshape = shape + " pairs=" + std::to_string(pairs.size());
  report("moe_expert_pairs_slots", pshape,
         nmse(rows_where(yslot, masked, n_embd, true), rows_where(p, masked, n_embd, true)), 1e-9);
  report_exact("moe_expert_pairs_slots others untouched", pshape,
               all_sentinel(rows_where(p, masked, n_embd, false)));
  report_exact("moe_expert_pairs_slots == masked moe_down_slots", pshape,
               std::memcmp(c.data(), p.data(), c.size() * sizeof(float)) == 0);
}

// out = Σ_j y[t][j]·w[t][j] against double, and bit for bit against the CPU executors' sum
// (runtime/moe/group.hpp weighted_sum: slots added in order); then rows scattered through a
// permuted index, the rest of y untouched.
void run_sum_scatter(int64_t n_tokens, int k, int64_t n_embd) {
  const std::string shape = "embd=" + std::to_string(n_embd) +
                            " tokens=" + std::to_string(n_tokens) + " k=" + std::to_string(k);
  const auto y = random_floats(n_tokens * k * n_embd, 500, -2.f, 2.f);
  const auto w = random_floats(n_tokens * k, 501, 0.05f, 1.f);
  std::vector<double> ref(n_tokens * n_embd, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int j = 0; j < k; ++j)
      for (int64_t d = 0; d < n_embd; ++d)
        ref[t * n_embd + d] += double(y[(t * k + j) * n_embd + d]) * w[t * k + j];
  std::vector<float> cpu(n_tokens * n_embd);
  weighted_sum(n_tokens, k, n_embd, y.data(), w.data(), cpu.data());
  DevBuf<float> dy(y), dw(w), dout(random_floats(n_tokens * n_embd, 502));
  cuda::moe_sum(dy.get(), dw.get(), n_tokens, k, n_embd, dout.get(), nullptr);
  const auto out = dout.download();
  report("moe_sum", shape, nmse(ref, out), 1e-12);
  report_exact("moe_sum == cpu weighted_sum", shape,
               std::memcmp(out.data(), cpu.data(), cpu.size() * sizeof(float)) == 0);

  // Scatter two thirds of the slots' rows, in a shuffled order.
  const int64_t n_rows = n_tokens * k, n = std::max<int64_t>(1, n_rows * 2 / 3);
  std::vector<int32_t> perm(n_rows);
  for (int64_t i = 0; i < n_rows; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(503));
  const std::vector<int32_t> idx(perm.begin(), perm.begin() + n);
  const auto rows = random_floats(n * n_embd, 504);
  std::vector<float> want(n_rows * n_embd, kSentinel);
  for (int64_t i = 0; i < n; ++i)
    std::copy(rows.begin() + i * n_embd, rows.begin() + (i + 1) * n_embd,
              want.begin() + idx[i] * n_embd);
  DevBuf<float> drows(rows), dys(std::vector<float>(n_rows * n_embd, kSentinel));
  DevBuf<int32_t> didx(idx);
  cuda::moe_scatter_rows(drows.get(), didx.get(), n, n_embd, dys.get(), nullptr);
  const auto got = dys.download();
  report_exact("moe_scatter_rows", shape + " rows=" + std::to_string(n),
               std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  if (n <= cuda::RowIndex::kMax) {  // the indices by value in the launch
    cuda::RowIndex by_value{};
    std::copy(idx.begin(), idx.end(), by_value.i);
    DevBuf<float> dys2(std::vector<float>(n_rows * n_embd, kSentinel));
    cuda::moe_scatter_rows(drows.get(), by_value, n, n_embd, dys2.get(), nullptr);
    const auto got2 = dys2.download();
    report_exact("moe_scatter_rows (indices by value)", shape + " rows=" + std::to_string(n),
                 std::memcmp(got2.data(), want.data(), want.size() * sizeof(float)) == 0);
  }
}

TEST(GpuMoe, QwenLikeQ4KQ6K) {
  FERRY_REQUIRE_GPU();
  run_case(GgmlType::Q4_K, GgmlType::Q6_K, 1024, 512, 1, 8);
  run_case(GgmlType::Q4_K, GgmlType::Q6_K, 512, 768, 3, 4);
}

TEST(GpuMoe, OtherTypes) {
  FERRY_REQUIRE_GPU();
  run_case(GgmlType::Q8_0, GgmlType::Q5_K, 512, 256, 2, 4);
  run_case(GgmlType::F16, GgmlType::F32, 256, 96, 2, 3);
  run_case(GgmlType::BF16, GgmlType::Q8_0, 256, 128, 1, 2);
}

// The types of llama.cpp's legacy, low-bit, IQ4 and MXFP4 files, each as gate/up and as down; one
// token (moe_decode_slots runs too) and three.
TEST(GpuMoe, MoreTypes) {
  FERRY_REQUIRE_GPU();
  const std::pair<GgmlType, GgmlType> pairs[] = {{GgmlType::Q4_0, GgmlType::Q4_1},   {GgmlType::Q5_0, GgmlType::Q5_1},
                                                 {GgmlType::IQ4_NL, GgmlType::MXFP4}, {GgmlType::Q2_K, GgmlType::Q3_K},
                                                 {GgmlType::IQ4_XS, GgmlType::Q4_0},  {GgmlType::Q3_K, GgmlType::IQ4_NL},
                                                 {GgmlType::MXFP4, GgmlType::IQ4_XS}, {GgmlType::Q4_1, GgmlType::Q2_K},
                                                 {GgmlType::Q5_1, GgmlType::Q5_0}};
  for (const auto& [gu, down] : pairs) {
    run_case(gu, down, 256, 256, 1, 4);
    run_case(gu, down, 512, 256, 3, 2);
  }
}

// Prompt batches: 40 tokens over 6 experts give every expert several tiles of 8 pairs and a part
// tile (moe_grouped_sum, and moe_expert_pairs_slots over one expert's ~27 pairs).
TEST(GpuMoe, PrefillBatchesGroupedByExpert) {
  FERRY_REQUIRE_GPU();
  run_case(GgmlType::Q4_K, GgmlType::Q6_K, 512, 256, 40, 4);
  run_case(GgmlType::IQ4_XS, GgmlType::Q8_0, 256, 128, 21, 8);
}

TEST(GpuMoe, PerSlotF32Q4K) {
  FERRY_REQUIRE_GPU();
  run_case(GgmlType::F32, GgmlType::Q4_K, 256, 256, 3, 4);
}

TEST(GpuMoe, SumAndScatter) {
  FERRY_REQUIRE_GPU();
  run_sum_scatter(1, 8, 1024);
  run_sum_scatter(5, 4, 300);
  run_sum_scatter(3, 1, 256);
}

#else
TEST(GpuMoe, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
