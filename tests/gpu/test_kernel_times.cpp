// The per-kernel timer (kernels/cuda/kernel_times.hpp, `ferry bench --kernel-times`) on the CUDA
// emulator: a timed decode of the tiny qwen35moe (35b-a3b per-layer structure) names exactly the
// kernels the emulator ran, with their counts, as its own trace (FERRY_CUDA_EMU_TRACE) records
// them; the launches (a prompt's cuBLAS GEMMs included) sum to kernels_launched()'s delta; times
// are >= 0 and sum to at most the wall time; off, the timer creates no events and changes no
// launch count; on again, it reuses its events. Added CI time: one tiny model, two loads
// (resident, offloaded), ~9 s (~23 s under ASan).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "gpu_test_util.hpp"
#include "offload/offload_executor.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/engine/engine.hpp"
#include "tiny_model.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/kernel_name.hpp"
#include "kernels/cuda/kernel_times.hpp"
#include "kernels/cuda/matmul.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

TEST(GpuKernelTimes, ShortensDemangledNames) {
  EXPECT_EQ(cuda::shorten_kernel_name(
                "void ferry::cuda::(anonymous namespace)::matvec<(ferry::GgmlType)12, 4>"
                "(float const*, ferry::cuda::Rows<float>, int)"),
            "matvec<Q4_K, 4>");
  EXPECT_EQ(cuda::shorten_kernel_name("void k<(ferry::GgmlType)9999, (ferry::NormKind)0>(int)"),
            "k<(GgmlType)9999, (NormKind)0>");
  EXPECT_EQ(cuda::shorten_kernel_name(
                "ferry::cuda::(anonymous namespace)::rmsnorm_kernel(float const*, float*, int)"),
            "rmsnorm_kernel");
  EXPECT_EQ(cuda::shorten_kernel_name("plain"), "plain");
  EXPECT_EQ(cuda::demangle("_ZN5ferry4cuda3fooEv"), "ferry::cuda::foo()");
  EXPECT_EQ(cuda::demangle("not_mangled"), "not_mangled");
}

#endif

#if defined(FERRY_CUDA_EMU)

// The emulator's trace of every kernel it runs, set before the first kernel (it opens the file
// once): the independent record the timer's names and counts are checked against.
const std::string kTracePath = [] {
  const std::string p = "/tmp/ferry-ktime-trace-" + std::to_string(::getpid()) + ".txt";
  ::setenv("FERRY_CUDA_EMU_TRACE", p.c_str(), 1);
  return p;
}();

std::vector<std::string> trace_lines() {
  std::ifstream in(kTracePath);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Kernel name → runs, for trace lines [from, to): "OFFSET OBJECT ..." (the kernel's address in its
// binary, this test program: the kernels are linked in statically; then its launch shape); the
// host calls' "api ..." lines are skipped.
std::map<std::string, uint64_t> traced_kernels(const std::vector<std::string>& lines, size_t from) {
  Dl_info self{};
  EXPECT_NE(dladdr(reinterpret_cast<const void*>(&trace_lines), &self), 0);
  std::map<std::string, uint64_t> out;
  for (size_t i = from; i < lines.size(); ++i) {
    std::istringstream ls(lines[i]);
    std::string offset, object;
    ls >> offset >> object;
    if (offset == "api") continue;
    EXPECT_EQ(object, self.dli_fname) << lines[i];
    const uintptr_t address =
        reinterpret_cast<uintptr_t>(self.dli_fbase) + std::stoull(offset, nullptr, 16);
    ++out[cuda::kernel_name(reinterpret_cast<const void*>(address))];
  }
  return out;
}

void decode(Session& s, int tokens, int first) {
  for (int i = 0; i < tokens; ++i) {
    const int32_t one[] = {static_cast<int32_t>(first + 5 * i)};
    s.eval(one);
  }
}

void check_timed_decode(const std::string& path, uint64_t vram) {
  SCOPED_TRACE(vram ? "offloaded" : "resident");
  RunOptions ro;
  ro.device = DeviceKind::cuda;
  ro.backend.cuda.graphs = false;
  ro.vram_bytes = vram ? std::optional<uint64_t>(vram) : std::nullopt;
  auto m = LoadedModel::load(path, {}, ro);
  OffloadExecutor* ox = m->moe().offload();
  EXPECT_EQ(ox != nullptr, vram != 0);
  Session s(*m);
  std::vector<int32_t> prompt(4);
  std::iota(prompt.begin(), prompt.end(), 3);
  s.eval(prompt);
  decode(s, 1, 7);  // warm-up: the first step allocates
  constexpr int kTokens = 2;

  // Off: no event, no record, the launches of an untimed decode.
  if (ox) ox->drain();
  const uint64_t events_before = cuda::kernel_timer_events_created();
  if (!vram) {
    EXPECT_EQ(events_before, 0u) << "the timer was never on: no event made";
  }
  uint64_t k0 = cuda_kernels_launched();
  decode(s, kTokens, 20);
  const uint64_t off_launches = cuda_kernels_launched() - k0;
  EXPECT_EQ(cuda::kernel_timer_events_created(), events_before);
  EXPECT_TRUE(cuda::take_kernel_times().kernels.empty());

  // On: the same launches, each named and timed.
  cuda::set_kernel_times(true);
  if (ox) ox->drain();
  const size_t trace_from = trace_lines().size();
  k0 = cuda_kernels_launched();
  const auto t0 = std::chrono::steady_clock::now();
  decode(s, kTokens, 20);
  const cuda::KernelTimes times = cuda::take_kernel_times();
  const double wall_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t on_launches = cuda_kernels_launched() - k0;
  const std::map<std::string, uint64_t> traced = traced_kernels(trace_lines(), trace_from);
  const uint64_t events = cuda::kernel_timer_events_created();

  EXPECT_TRUE(times.emulated);
  EXPECT_EQ(times.untimed_launches, 0u);
  ASSERT_FALSE(times.kernels.empty());
  std::map<std::string, uint64_t> timed;
  uint64_t launches = 0;
  double sum_us = 0;
  for (const cuda::KernelTime& k : times.kernels) {
    EXPECT_GE(k.total_us, 0.0) << k.name;
    EXPECT_EQ(k.name.find("kernel@"), std::string::npos) << "a kernel without a symbol: " << k.name;
    timed[k.name] = k.launches;
    launches += k.launches;
    sum_us += k.total_us;
    std::printf("[kernel-times] %s %s: %.2f launches/token, %.1f us/token (emulator: CPU time)\n",
                vram ? "offloaded" : "resident", k.name.c_str(), double(k.launches) / kTokens,
                k.total_us / kTokens);
  }
  EXPECT_EQ(launches, on_launches)
      << "every kernel the emulator ran went through launch() and was timed";
  // Offloaded, the misses (and so the launches) depend on what the cache holds by then.
  if (!ox) {
    EXPECT_EQ(on_launches, off_launches) << "the timer changes no launch";
  }
  EXPECT_EQ(timed, traced) << "names and counts as the emulator's trace records them";
  EXPECT_LE(sum_us, wall_us);
  // Every event is back in the pool after a take: a window makes only the pairs the pool lacks.
  auto made_for = [](uint64_t pool, uint64_t n) { return 2 * (n > pool / 2 ? n - pool / 2 : 0); };
  EXPECT_EQ(events, events_before + made_for(events_before, launches))
      << "two events per launch, pooled";

  // Again: the pool's events are reused; only launches beyond the last window's need new ones.
  decode(s, kTokens, 20);
  uint64_t again = 0;
  for (const cuda::KernelTime& k : cuda::take_kernel_times().kernels) again += k.launches;
  EXPECT_GT(again, 0u);
  EXPECT_EQ(cuda::kernel_timer_events_created(), events + made_for(events, again));
  if (!ox) {
    // A prompt past the direct matmul's batch (kDirectMaxBatch) runs its projections as cuBLAS
    // GEMMs, which do not go through launch(): Blas times them itself, so the rows still sum to
    // every kernel run.
    s.reset();
    std::vector<int32_t> long_prompt(static_cast<size_t>(cuda::kDirectMaxBatch) + 1);
    std::iota(long_prompt.begin(), long_prompt.end(), 30);
    k0 = cuda_kernels_launched();
    s.eval(long_prompt);
    uint64_t prompt_launches = 0, gemms = 0;
    for (const cuda::KernelTime& k : cuda::take_kernel_times().kernels) {
      prompt_launches += k.launches;
      if (k.name == "cublasGemmEx") gemms = k.launches;
    }
    EXPECT_EQ(prompt_launches, cuda_kernels_launched() - k0);
    EXPECT_GT(gemms, 0u) << "the prompt's GEMMs are timed";
  }
  cuda::set_kernel_times(false);
  m->moe().finish();
}

TEST(GpuKernelTimes, TimedDecodeNamesTheKernelsTheEmulatorRan) {
  FERRY_REQUIRE_GPU();
  EXPECT_FALSE(cuda::kernel_times_enabled()) << "off until a program turns it on";
  const std::string path = tiny_model(synth::Arch::qwen35moe, "ktime", 11);
  check_timed_decode(path, 0);
  // A budget a few experts short (tests/gpu/test_launch_counts.cpp): the offload engine's decode.
  check_timed_decode(path, parse_size("132.5M"));
  std::remove(kTracePath.c_str());
}

#else

TEST(GpuKernelTimes, TimedDecodeNamesTheKernelsTheEmulatorRan) {
  GTEST_SKIP() << "checked against the CUDA emulator's trace (FERRY_CUDA=EMU); on a GPU, ferry "
                  "bench --kernel-times";
}

#endif

}  // namespace
}  // namespace ferry::gputest
