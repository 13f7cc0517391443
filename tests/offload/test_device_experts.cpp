// The sim DeviceExpertKernels' per-slot entry points, run through a sim stream: a step composed
// from slot experts (experts_per_slot over a permuted table), streamed experts
// (expert_pairs_per_slot, one call per expert), CPU experts (compute_decode / compute_group rows
// placed with scatter_rows) and one weighted_sum must be bit-identical to MoeCpuExecutor::run on
// the same step, whatever path each expert took.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "offload/device_experts.hpp"
#include "runtime/moe/cpu_executor.hpp"
#include "runtime/moe/cpu_experts.hpp"

namespace ferry {
namespace {

constexpr int32_t kExperts = 8;
constexpr int32_t kTopK = 4;
constexpr int64_t kEmbd = 256;  // one Q4_K block per row
constexpr int64_t kFf = 256;

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// kExperts experts of (rows, cols) matrices of type t, quantized from random floats.
std::vector<uint8_t> random_experts(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  std::vector<uint8_t> bytes(rb * static_cast<uint64_t>(rows * kExperts));
  const auto f = random_floats(static_cast<size_t>(rows * cols * kExperts), seed);
  for (int64_t r = 0; r < rows * kExperts; ++r)
    cpu::quantize_row_ref(t, f.data() + r * cols, bytes.data() + static_cast<uint64_t>(r) * rb,
                          cols);
  return bytes;
}

struct Layer {
  std::vector<uint8_t> gate, up, down;
  MoeLayerWeights w;
};

Layer make_layer(GgmlType t_gate_up, GgmlType t_down) {
  Layer L;
  L.gate = random_experts(t_gate_up, kFf, kEmbd, 11);
  L.up = random_experts(t_gate_up, kFf, kEmbd, 12);
  L.down = random_experts(t_down, kEmbd, kFf, 13);
  const uint64_t gu = row_bytes(t_gate_up, kEmbd) * kFf, d = row_bytes(t_down, kFf) * kEmbd;
  L.w.gate = ExpertTensor{L.gate.data(), t_gate_up, kEmbd, kFf, gu};
  L.w.up = ExpertTensor{L.up.data(), t_gate_up, kEmbd, kFf, gu};
  L.w.down = ExpertTensor{L.down.data(), t_down, kFf, kEmbd, d};
  L.w.n_expert = kExperts;
  return L;
}

enum class Path { slot, streamed, cpu };

// One step of n_tokens through the sim kernels with expert e taking path_of(e); out compared
// bit for bit with MoeCpuExecutor.
template <typename PathOf>
void check_step(const Layer& L, int32_t n_tokens, PathOf path_of, const std::string& what) {
  SCOPED_TRACE(what + " n_tokens=" + std::to_string(n_tokens));
  const int64_t N = n_tokens, K = kTopK, E = kEmbd;
  std::mt19937 rng(static_cast<uint32_t>(100 + n_tokens));
  std::vector<int32_t> ids(static_cast<size_t>(N * K));
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int32_t> all(kExperts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + K, ids.begin() + t * K);
  }
  const auto weights =
      random_floats(static_cast<size_t>(N * K), 200 + static_cast<uint32_t>(n_tokens), 0.05f, 1.f);
  const auto x =
      random_floats(static_cast<size_t>(N * E), 300 + static_cast<uint32_t>(n_tokens), -1.5f, 1.5f);

  MoeStep step;
  step.n_tokens = n_tokens;
  step.n_embd = static_cast<int32_t>(E);
  step.top_k = kTopK;
  step.x = x.data();
  step.expert_ids = ids.data();
  step.expert_weights = weights.data();
  std::vector<float> want(static_cast<size_t>(N * E));
  step.out = want.data();
  MoeCpuExecutor({L.w}).run(step);

  const ExpertShape shape = expert_shape(L.w);
  std::vector<ExpertPtrs> ptrs(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) ptrs[static_cast<size_t>(e)] = expert_ptrs(L.w, e);

  // Slot experts in a table of their own, in reverse order (a table entry is not an expert id).
  std::vector<ExpertPtrs> table;
  std::vector<int32_t> entry_of(kExperts, -1);
  for (int32_t e = kExperts - 1; e >= 0; --e)
    if (path_of(e) == Path::slot) {
      entry_of[static_cast<size_t>(e)] = static_cast<int32_t>(table.size());
      table.push_back(ptrs[static_cast<size_t>(e)]);
    }
  std::vector<int32_t> slot_ids(ids.size());
  for (size_t p = 0; p < ids.size(); ++p) slot_ids[p] = entry_of[static_cast<size_t>(ids[p])];

  // Streamed experts: each its pairs in token order.
  std::vector<std::vector<int32_t>> streamed(kExperts);
  for (size_t p = 0; p < ids.size(); ++p)
    if (path_of(ids[p]) == Path::streamed)
      streamed[static_cast<size_t>(ids[p])].push_back(static_cast<int32_t>(p));

  // CPU experts, computed here as the exact flow computes them, then copied row by row in a
  // shuffled order.
  std::vector<float> y_cpu(static_cast<size_t>(N * K * E));
  if (N == 1) {
    std::vector<uint8_t> on_cpu(static_cast<size_t>(K));
    std::vector<ExpertPtrs> w(static_cast<size_t>(K));
    for (int64_t j = 0; j < K; ++j) {
      on_cpu[static_cast<size_t>(j)] = path_of(ids[static_cast<size_t>(j)]) == Path::cpu;
      w[static_cast<size_t>(j)] = ptrs[static_cast<size_t>(ids[static_cast<size_t>(j)])];
    }
    compute_decode(shape, x.data(), w, on_cpu, y_cpu.data());
  } else {
    const ExpertBatch batch(shape, step, kExperts);
    for (int32_t e = 0; e < kExperts; ++e)
      if (path_of(e) == Path::cpu)
        batch.compute_group(e, ptrs[static_cast<size_t>(e)], y_cpu.data());
  }
  std::vector<int32_t> idx;
  for (size_t p = 0; p < ids.size(); ++p)
    if (path_of(ids[p]) == Path::cpu) idx.push_back(static_cast<int32_t>(p));
  std::shuffle(idx.begin(), idx.end(), rng);
  std::vector<float> rows(idx.size() * static_cast<size_t>(E));
  for (size_t i = 0; i < idx.size(); ++i)
    std::memcpy(rows.data() + i * E, y_cpu.data() + int64_t{idx[i]} * E,
                static_cast<size_t>(E) * sizeof(float));

  // Unwritten rows would poison the sum.
  std::vector<float> y_slots(static_cast<size_t>(N * K * E),
                             std::numeric_limits<float>::quiet_NaN());
  std::vector<float> got(static_cast<size_t>(N * E), -7.f);
  auto dev = make_device(DeviceKind::sim);
  auto stream = dev->create_stream();
  auto kernels = make_sim_expert_kernels();
  if (!table.empty())
    kernels->experts_per_slot(shape, table.data(), static_cast<int64_t>(table.size()), slot_ids.data(), N, kTopK,
                              x.data(),
                              y_slots.data(), *stream);
  for (int32_t e = 0; e < kExperts; ++e)
    if (const auto& pairs = streamed[static_cast<size_t>(e)]; !pairs.empty())
      kernels->expert_pairs_per_slot(shape, &ptrs[static_cast<size_t>(e)], pairs.data(),
                                     static_cast<int64_t>(pairs.size()), kTopK, x.data(),
                                     y_slots.data(), *stream);
  kernels->scatter_rows(y_slots.data(), rows.data(), idx.data(), static_cast<int64_t>(idx.size()),
                        E, *stream);
  kernels->weighted_sum(y_slots.data(), weights.data(), N, kTopK, E, got.data(), *stream);
  stream->synchronize();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

void check_layer(GgmlType t_gate_up, GgmlType t_down) {
  SCOPED_TRACE(std::string(type_name(t_gate_up)) + "/" + std::string(type_name(t_down)));
  const Layer L = make_layer(t_gate_up, t_down);
  for (const int32_t n : {1, 7}) {
    check_step(
        L, n, [](int32_t e) { return static_cast<Path>(e % 3); }, "mixed");
    check_step(
        L, n, [](int32_t) { return Path::slot; }, "all slots");
    check_step(
        L, n, [](int32_t) { return Path::streamed; }, "all streamed");
    check_step(
        L, n, [](int32_t) { return Path::cpu; }, "all cpu");
  }
}

TEST(SimDeviceExperts, PerSlotPathsMatchCpuExecutorF32) {
  check_layer(GgmlType::F32, GgmlType::F32);
}

TEST(SimDeviceExperts, PerSlotPathsMatchCpuExecutorQ4KQ80) {
  check_layer(GgmlType::Q4_K, GgmlType::Q8_0);
}

TEST(SimDeviceExperts, PerSlotPathsMatchCpuExecutorQ80Q4K) {
  check_layer(GgmlType::Q8_0, GgmlType::Q4_K);
}

}  // namespace
}  // namespace ferry
