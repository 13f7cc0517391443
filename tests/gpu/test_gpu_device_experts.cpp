// The CUDA DeviceExpertKernels' per-slot entry points: a step composed from slot experts
// (experts_per_slot over a permuted table), streamed experts (expert_pairs_per_slot, one call per
// expert), rows computed apart and placed with scatter_rows, then weighted_sum, must give the bits
// of the grouped kernels (moe_gate_up_swiglu + moe_down_slots + moe_sum over every slot, as the resident executor runs them): both compute each slot's
// down row with the same warp code and add w·y in slot order (0 + w₀y₀ is exact). A decode step's
// fused forms (experts_decode_sum, weighted_sum_rows) give the same bits in fewer launches.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/cpu/quants.hpp"
#include "offload/device_experts.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"
#include "tests/gpu/gpu_test_util.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/moe.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

constexpr int32_t kExperts = 8;
constexpr int32_t kTopK = 4;

// kExperts (rows, cols) matrices of type t from random floats, back to back.
std::vector<uint8_t> random_experts(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  std::vector<uint8_t> bytes(rb * static_cast<uint64_t>(rows * kExperts));
  const auto f = random_floats(static_cast<size_t>(rows * cols * kExperts), seed);
  for (int64_t r = 0; r < rows * kExperts; ++r)
    cpu::quantize_row_ref(t, f.data() + r * cols, bytes.data() + static_cast<uint64_t>(r) * rb,
                          cols);
  return bytes;
}

void run_step(GgmlType t_gu, GgmlType t_down, int64_t n_embd, int64_t n_ff, int32_t n_tokens) {
  const int64_t N = n_tokens, K = kTopK, E = n_embd;
  const ExpertShape s{t_gu, t_gu, t_down, n_embd, n_ff};
  DevBuf<uint8_t> gate(random_experts(t_gu, n_ff, n_embd, 11)),
      up(random_experts(t_gu, n_ff, n_embd, 12)), down(random_experts(t_down, n_embd, n_ff, 13));
  std::vector<ExpertPtrs> ptrs(kExperts);
  for (int32_t e = 0; e < kExperts; ++e)
    ptrs[e] = {gate.get() + e * s.gate_bytes(), up.get() + e * s.up_bytes(),
               down.get() + e * s.down_bytes()};

  std::mt19937 rng(static_cast<uint32_t>(100 + n_tokens));
  std::vector<int32_t> ids(N * K);
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int32_t> all(kExperts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + K, ids.begin() + t * K);
  }
  const auto w = random_floats(N * K, 200, 0.05f, 1.f);
  const auto x = random_floats(N * E, 300, -1.5f, 1.5f);

  // Paths by expert: e % 3 == 0 slot table (reverse order), 1 streamed, 2 computed apart (here by
  // experts_per_slot into a buffer of their own, as the CPU would) and scattered.
  std::vector<ExpertPtrs> table;
  std::vector<int32_t> entry_of(kExperts, -1), slot_ids(N * K), apart_ids(N * K, -1), idx;
  for (int32_t e = kExperts - 1; e >= 0; --e)
    if (e % 3 == 0) {
      entry_of[e] = static_cast<int32_t>(table.size());
      table.push_back(ptrs[e]);
    }
  std::vector<std::vector<int32_t>> streamed(kExperts);
  for (int64_t p = 0; p < N * K; ++p) {
    slot_ids[p] = entry_of[ids[p]];
    if (ids[p] % 3 == 1) streamed[ids[p]].push_back(static_cast<int32_t>(p));
    if (ids[p] % 3 == 2) {
      apart_ids[p] = ids[p];
      idx.push_back(static_cast<int32_t>(p));
    }
  }
  std::shuffle(idx.begin(), idx.end(), rng);

  DeviceOptions o;
  o.budget_bytes = 1ull << 30;
  auto dev = make_device(DeviceKind::cuda, o);
  auto stream = dev->create_stream();
  auto kernels = make_cuda_expert_kernels(*dev);
  auto upload = [](const std::vector<ExpertPtrs>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(ExpertPtrs));
    std::memcpy(b.data(), v.data(), b.size());
    return DevBuf<uint8_t>(b);
  };
  DevBuf<uint8_t> dptrs = upload(ptrs), dtable = upload(table);
  const auto* all_experts = reinterpret_cast<const ExpertPtrs*>(dptrs.get());
  DevBuf<int32_t> dids(ids), dslot_ids(slot_ids), dapart_ids(apart_ids), didx(idx);
  DevBuf<float> dx(x), dw(w), dy_slots(std::vector<float>(N * K * E, 1e30f)), dapart(N * K * E),
      drows(idx.size() * E);
  DevBuf<float> dout(N * E), dref(N * E), dh(N * K * n_ff);

  // The rows computed apart, gathered in idx's order (device to device, as a host copy would be).
  kernels->experts_per_slot(s, all_experts, kExperts, dapart_ids.get(), N, kTopK, dx.get(), dapart.get(),
                            *stream);
  stream->synchronize();
  for (size_t i = 0; i < idx.size(); ++i)
    FERRY_CUDA_CHECK(cudaMemcpy(drows.get() + i * E, dapart.get() + int64_t{idx[i]} * E,
                                E * sizeof(float), cudaMemcpyDeviceToDevice));

  std::vector<std::unique_ptr<DevBuf<int32_t>>> dpairs;
  kernels->experts_per_slot(s, reinterpret_cast<const ExpertPtrs*>(dtable.get()), static_cast<int64_t>(table.size()),
                            dslot_ids.get(),
                            N, kTopK, dx.get(), dy_slots.get(), *stream);
  for (int32_t e = 0; e < kExperts; ++e)
    if (!streamed[e].empty()) {
      dpairs.push_back(std::make_unique<DevBuf<int32_t>>(streamed[e]));
      kernels->expert_pairs_per_slot(s, all_experts + e, dpairs.back()->get(),
                                     static_cast<int64_t>(streamed[e].size()), kTopK, dx.get(),
                                     dy_slots.get(), *stream);
    }
  kernels->scatter_rows(dy_slots.get(), drows.get(), didx.get(), static_cast<int64_t>(idx.size()),
                        E, *stream);
  kernels->weighted_sum(dy_slots.get(), dw.get(), N, kTopK, E, dout.get(), *stream);
  stream->synchronize();

  const auto* tab = reinterpret_cast<const ExpertPtrs*>(dptrs.get());
  cuda::moe_gate_up_swiglu(t_gu, tab, dids.get(), N, kTopK, n_embd, n_ff, dx.get(), dh.get(),
                           nullptr);
  DevBuf<float> dref_slots(static_cast<size_t>(N) * kTopK * E);
  cuda::moe_down_slots(t_down, tab, dids.get(), N, kTopK, n_embd, n_ff, dh.get(), dref_slots.get(),
                       nullptr);
  cuda::moe_sum(dref_slots.get(), dw.get(), N, kTopK, E, dref.get(), nullptr);
  const auto got = dout.download(), want = dref.download();
  const std::string shape = std::string(type_name(t_gu)) + "/" + std::string(type_name(t_down)) +
                            " embd=" + std::to_string(n_embd) + " ff=" + std::to_string(n_ff) +
                            " tokens=" + std::to_string(n_tokens) + " k=" + std::to_string(kTopK);
  report_exact("cuda expert kernels per-slot paths == grouped", shape,
               std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  if (N != 1) return;

  // The fused decode forms: every slot by value with the sum in the down launch (2 launches); and
  // the slots computed apart read by the sum in place of a scatter (experts_decode, then 1 launch).
  DecodeSlots all, on_device;
  RowIndex rows_at;
  for (int32_t j = 0; j < kTopK; ++j) {
    all.w[j] = ptrs[ids[j]];
    if (ids[j] % 3 != 2) on_device.w[j] = ptrs[ids[j]];
  }
  for (size_t i = 0; i < idx.size(); ++i) rows_at.i[i] = idx[i];
  DevBuf<float> dsum(E), dsum_rows(E), dslots2(std::vector<float>(K * E, 1e30f));
  const uint64_t k0 = cuda_kernels_launched();
  kernels->experts_decode_sum(s, all, kTopK, dx.get(), dy_slots.get(), dw.get(), dsum.get(), *stream);
  stream->synchronize();
  EXPECT_EQ(cuda_kernels_launched() - k0, 2u) << shape;
  kernels->experts_decode(s, on_device, kTopK, dx.get(), dslots2.get(), *stream);
  stream->synchronize();  // the emulator counts a kernel when it runs
  const uint64_t k1 = cuda_kernels_launched();
  kernels->weighted_sum_rows(dslots2.get(), drows.get(), rows_at, static_cast<int64_t>(idx.size()), dw.get(), kTopK,
                             E, dsum_rows.get(), *stream);
  stream->synchronize();
  EXPECT_EQ(cuda_kernels_launched() - k1, 1u) << shape;
  const auto sum = dsum.download(), sum_rows = dsum_rows.download();
  report_exact("experts_decode_sum == grouped", shape, std::memcmp(sum.data(), want.data(), E * sizeof(float)) == 0);
  report_exact("experts_decode + weighted_sum_rows == grouped", shape,
               std::memcmp(sum_rows.data(), want.data(), E * sizeof(float)) == 0);
}

TEST(GpuDeviceExperts, PerSlotPathsMatchGrouped) {
  FERRY_REQUIRE_GPU();
  for (const int32_t n : {1, 7, 20}) {  // 20 tokens: the slot experts grouped by entry (16 or more)
    run_step(GgmlType::F32, GgmlType::F32, 256, 128, n);
    run_step(GgmlType::Q4_K, GgmlType::Q8_0, 256, 256, n);
    run_step(GgmlType::Q8_0, GgmlType::Q6_K, 256, 256, n);
  }
}

#else
TEST(GpuDeviceExperts, Skipped) {
  GTEST_SKIP() << "built without CUDA";
}
#endif

}  // namespace
}  // namespace ferry::gputest
