// CpuOps gives the same bytes whatever the number of oneTBB threads. The GPU tests compare the CUDA
// backend with CpuOps on a 16-core host while the rest of the suite runs on 2 cores; a CPU result
// that depended on the thread count (a race, a split-dependent sum) would show there as a GPU
// failure. Here the same ops run in an arena of 1 thread and of 16 (oversubscribed on a small
// machine, which is what exposes an unsafe split), a few times each, and must match bit for bit.
// Random data throughout.
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/types.hpp"

namespace ferry {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = d(rng) * (i % 37 == 0 ? 8.f : 1.f);  // a few outliers
  return v;
}

// A weight of `type` quantized from random values (the reference quantizer).
std::vector<uint8_t> random_weight(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = random_values(static_cast<size_t>(rows * cols), seed);
  const size_t rb = static_cast<size_t>(row_bytes(type, static_cast<uint64_t>(cols)));
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) cpu::quantize_row_ref(type, f.data() + r * cols, w.data() + r * rb, cols);
  return w;
}

// fn run in an arena of `threads` threads.
template <typename F>
void in_arena(int threads, F&& fn) {
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  tbb::task_arena arena(threads);
  arena.execute(fn);
}

constexpr int kManyThreads = 16;
constexpr int kRepeats = 3;

TEST(CpuOpsThreads, KvStoreBytesDoNotDependOnTheThreadCount) {
  CpuOps ops;
  for (int32_t hd : {32, 128, 256}) {
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::IQ4_NL, GgmlType::Q5_0,
                       GgmlType::Q5_1, GgmlType::BF16, GgmlType::F16}) {
      const int32_t n_kv = 2;
      const int64_t n_ctx = 24, n_tokens = 17;
      const auto k = random_values(static_cast<size_t>(n_tokens * n_kv * hd), 11 + static_cast<uint32_t>(hd));
      const auto v = random_values(static_cast<size_t>(n_tokens * n_kv * hd), 12 + static_cast<uint32_t>(hd));
      KvLayerView kv{nullptr, nullptr, t, t, n_ctx, n_kv, hd, hd};
      const size_t kb = static_cast<size_t>(n_ctx) * n_kv * kv.k_head_bytes();
      auto store = [&](int threads) {
        std::vector<uint8_t> kc(kb, 0xA5), vc(kb, 0x5A);
        KvLayerView view = kv;
        view.k = kc.data();
        view.v = vc.data();
        in_arena(threads, [&] { ops.kv_store(view, 3, n_tokens, k.data(), v.data()); });
        kc.insert(kc.end(), vc.begin(), vc.end());
        return kc;
      };
      const auto one = store(1);
      for (int rep = 0; rep < kRepeats; ++rep)
        EXPECT_EQ(store(kManyThreads), one) << type_name(t) << " head_dim " << hd << " repetition " << rep;
    }
  }
}

TEST(CpuOpsThreads, MatmulAndSwigluDoNotDependOnTheThreadCount) {
  CpuOps ops;
  const int64_t cols = 512;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F32}) {
    for (int64_t rows : {8, 48, 300}) {
      for (int64_t n : {1, 3, 8, 33}) {
        const auto gate = random_weight(t, rows, cols, 21), up = random_weight(t, rows, cols, 22);
        const auto x = random_values(static_cast<size_t>(n * cols), 23);
        const WeightView wg{gate.data(), t, rows, cols}, wu{up.data(), t, rows, cols};
        auto run = [&](int threads) {
          std::vector<float> g(static_cast<size_t>(n * rows)), u(g.size());
          in_arena(threads, [&] {
            ops.matmul(wg, x.data(), cols, n, g.data(), rows);
            ops.matmul(wu, x.data(), cols, n, u.data(), rows);
            ops.swiglu(g.data(), u.data(), n, rows, g.data());
          });
          return g;
        };
        const auto one = run(1);
        for (int rep = 0; rep < kRepeats; ++rep) {
          const auto many = run(kManyThreads);
          EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0)
              << type_name(t) << " " << rows << "x" << cols << " n=" << n << " repetition " << rep;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ferry
