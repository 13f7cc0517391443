// bench_gpu_e2e MODEL.gguf [--prompt N] [--decode N] [--reps N] [--vram SIZE] [--int8-dot]
// [--kernel-times] — the
// whole model resident on CUDA (CudaOps + the resident MoE executor): prompt processing (ppN, one
// forward of N tokens) and decode (tgN, single-token steps, logits copied to the host each step as
// generation needs) in tok/s, with the weight bytes a decoded token reads (dense tensors + top-k
// experts per layer + one embedding row), the HBM bandwidth measured here (device-to-device copy),
// and the fraction of that speed of light decode reaches. Prints one markdown table; with
// --kernel-times, then one more eager decode with every kernel timed (kernels/cuda/kernel_times.hpp)
// and ferry bench --kernel-times's table of it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/backend/cuda_device.hpp"
#include "runtime/cli/bench_report.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/moe/cuda_resident.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/model.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.cuh"
#endif

namespace {

#if FERRY_HAVE_CUDA
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Device-to-device copy of 1 GiB: read + write bytes over the time (median of 5).
double measure_hbm_gbps() {
  const size_t bytes = 1ull << 30;
  void *a = nullptr, *b = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&a, bytes));
  FERRY_CUDA_CHECK(cudaMalloc(&b, bytes));
  FERRY_CUDA_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  FERRY_CUDA_CHECK(cudaEventCreate(&e0));
  FERRY_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < 6; ++i) {
    FERRY_CUDA_CHECK(cudaEventRecord(e0));
    FERRY_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    FERRY_CUDA_CHECK(cudaEventRecord(e1));
    FERRY_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0) t.push_back(ms);  // the first copy warms up
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (t[t.size() / 2] * 1e-3) / 1e9;
}

// Weight bytes one decoded token reads: every dense tensor once, top-k of n_expert of each expert
// tensor, one row of token_embd (unless it is also the lm_head, then all of it).
uint64_t bytes_per_token(const ferry::gguf::File& f, const ferry::ModelConfig& c) {
  bool tied = true;
  for (const auto& t : f.tensors())
    if (t.name == "output.weight") tied = false;
  double n = 0;
  for (const auto& t : f.tensors()) {
    if (t.name.find("_exps") != std::string::npos)
      n += static_cast<double>(t.n_bytes) * c.n_expert_used / c.n_expert;
    else if (t.name == "token_embd.weight" && !tied)
      n += static_cast<double>(t.n_bytes) / c.n_vocab;
    else if (t.name.find("mtp") == std::string::npos)
      n += static_cast<double>(t.n_bytes);
  }
  return static_cast<uint64_t>(n);
}
#endif

int usage() {
  std::fprintf(stderr,
               "usage: bench_gpu_e2e MODEL.gguf [--prompt N=512] [--decode N=128] [--reps N=3] "
               "[--vram SIZE] [--int8-dot] [--kernel-times]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry;
  if (argc < 2) return usage();
  const std::string path = argv[1];
  int n_prompt = 512, n_decode = 128, reps = 3;
  uint64_t vram = 0;
  CudaOpsOptions cuda_options;
  cuda_options.graphs = true;  // decode is timed with graphs, then kernel by kernel
  bool kernel_times = false;
  try {
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--int8-dot") {  // CudaOpsOptions::int8_dot, as `ferry --cuda-int8-dot`
        cuda_options.int8_dot = true;
        continue;
      }
      if (a == "--kernel-times") {
        kernel_times = true;
        continue;
      }
      if (i + 1 >= argc) return usage();
      const char* v = argv[++i];
      if (a == "--prompt") n_prompt = std::stoi(v);
      else if (a == "--decode") n_decode = std::stoi(v);
      else if (a == "--reps") reps = std::stoi(v);
      else if (a == "--vram") vram = parse_size(v);
      else return usage();
    }
    if (n_prompt < 1 || n_decode < 1 || reps < 1) return usage();
    (void)vram;  // read only in a CUDA build, as cuda_options
    (void)cuda_options;
    (void)kernel_times;
    if (cuda_device_count() == 0) {
      std::printf("bench_gpu_e2e: no CUDA device, nothing measured\n");
      return 0;
    }
#if FERRY_HAVE_CUDA
    const double hbm_gbps = measure_hbm_gbps();
    const gguf::File f = gguf::File::open(path);
    DeviceOptions o;
    o.budget_bytes = vram;
    auto dev = make_device(DeviceKind::cuda, o);
    auto ops = make_cuda_ops(*dev, cuda_options);
    Ops& g = *ops;
    auto t0 = Clock::now();
    auto m = load_model(f, g, [&g](const std::vector<MoeLayerWeights>& l) { return make_cuda_resident_executor(g, l); });
    g.sync();
    const double load_ms = ms_since(t0);
    const ModelConfig& c = m->config();

    StateOptions so;
    so.n_ctx = n_prompt + n_decode + 16;
    so.n_batch = std::min(n_prompt, 512);
    auto st = m->new_state(so);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> tok(0, c.n_vocab - 1);
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (auto& t : prompt) t = tok(rng);
    std::vector<float> logits(static_cast<size_t>(c.n_vocab));

    // Warm-up: kernels' first launches, cuBLAS heuristics.
    m->forward(*st, std::span<const int32_t>(prompt.data(), std::min<size_t>(prompt.size(), 16)), LogitsMode::last,
               logits.data());
    m->forward(*st, std::span<const int32_t>(prompt.data(), 1), LogitsMode::last, logits.data());

    std::vector<double> pp_ms, tg_ms, tg_eager_ms;
    double calls_per_token = 0;
    auto decode = [&] {
      const auto t = Clock::now();
      for (int i = 0; i < n_decode; ++i) {
        const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        m->forward(*st, std::span<const int32_t>(&next, 1), LogitsMode::last, logits.data());
      }
      return ms_since(t);
    };
    for (int r = 0; r < reps; ++r) {
      st->reset();
      t0 = Clock::now();
      m->forward(*st, prompt, LogitsMode::last, logits.data());  // ends with a logits copy: synchronous
      pp_ms.push_back(ms_since(t0));
      const uint64_t calls0 = cuda_ops_calls(g);
      tg_ms.push_back(decode());  // one-token steps as CUDA graphs
      calls_per_token = static_cast<double>(cuda_ops_calls(g) - calls0) / n_decode;
    }
    // The same decode launched kernel by kernel: what the graphs save.
    const CudaGraphStats gs = cuda_ops_graph_stats(g);
    cuda_ops_set_graphs(g, false);
    for (int r = 0; r < reps; ++r) {
      st->reset();
      m->forward(*st, prompt, LogitsMode::last, logits.data());
      tg_eager_ms.push_back(decode());
    }
    std::string kernel_table;
    if (kernel_times) {  // one more eager decode, every launch between two events
      st->reset();
      m->forward(*st, prompt, LogitsMode::last, logits.data());
      cli::kernel_times_timing(true);
      (void)decode();  // fills the timer's event pool (an event created per launch, once)
      cli::kernel_times_timing(false);
      (void)cli::kernel_times_take(1, 0);
      st->reset();
      m->forward(*st, prompt, LogitsMode::last, logits.data());
      cli::kernel_times_timing(true);
      const double wall_ms = decode();
      cli::kernel_times_timing(false);
      const cli::BenchKernelTimes k = cli::kernel_times_take(n_decode, wall_ms * 1e3);
      kernel_table = fmt::format("\n{}{}", cli::kernel_times_heading(fmt::format("tg{} eager, resident", n_decode), k.emulated),
                                 cli::kernel_times_table(k));
    }
    cuda_ops_set_graphs(g, true);
    std::sort(tg_eager_ms.begin(), tg_eager_ms.end());
    const double tg_eager_tok_s = n_decode / (tg_eager_ms[tg_eager_ms.size() / 2] * 1e-3);
    std::sort(pp_ms.begin(), pp_ms.end());
    std::sort(tg_ms.begin(), tg_ms.end());
    const double pp_tok_s = n_prompt / (pp_ms[pp_ms.size() / 2] * 1e-3);
    const double tg_tok_s = n_decode / (tg_ms[tg_ms.size() / 2] * 1e-3);
    const uint64_t bpt = bytes_per_token(f, c);
    const double sol = tg_tok_s * static_cast<double>(bpt) / (hbm_gbps * 1e9);
    // Kernel launches per token: the Ops calls (each one kernel, a copy or a memset; a few
    // launch two) plus the MoE executor's two per layer.
    const double launches = calls_per_token + 2.0 * c.n_layer;
    const MemoryStats ms = dev->memory();
    std::printf("\n| model | arch | layers | load s | pp%d tok/s | tg%d tok/s | tg eager tok/s | MB/token | HBM GB/s | SOL | launches/token | graphs | VRAM peak GiB |\n",
                n_prompt, n_decode);
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    const std::string base = path.substr(path.find_last_of('/') + 1);
    const std::string graphs = gs.enabled ? fmt::format("{} launches, {} inst.", gs.launches, gs.instantiations) : "off";
    std::printf("| %s | %s | %d | %.1f | %.0f | %.1f | %.1f | %.1f | %.0f | %.1f%% | ~%.0f | %s | %.2f |\n", base.c_str(),
                std::string(arch_name(c.arch)).c_str(), c.n_layer, load_ms / 1e3, pp_tok_s, tg_tok_s, tg_eager_tok_s,
                static_cast<double>(bpt) / 1e6, hbm_gbps, 100.0 * sol, launches, graphs.c_str(),
                static_cast<double>(ms.peak_bytes) / (1ull << 30));
    std::printf("[gpu-bench] e2e %s | pp%d %.0f tok/s | tg%d %.1f tok/s (eager %.1f) | %.1f%% SOL | %.0f launches/token\n",
                base.c_str(), n_prompt, pp_tok_s, n_decode, tg_tok_s, tg_eager_tok_s, 100.0 * sol, launches);
    std::fputs(kernel_table.c_str(), stdout);
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_e2e: %s\n", e.what());
    return 1;
  }
}
