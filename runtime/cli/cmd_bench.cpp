// `ferry bench`: llama-bench-compatible throughput tests (pp, tg, pp+tg, at a context depth) over
// sweeps of models, threads, KV types, devices, VRAM budgets and routing; results on stdout
// (md, csv, json, jsonl), progress on stderr. See bench/README.md.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "runtime/cli/bench_membw.hpp"
#include "runtime/cli/bench_report.hpp"
#include "runtime/cli/bench_run.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/threads.hpp"

namespace ferry::cli {
namespace {

std::vector<int32_t> int_list(const std::vector<std::string>& in, const char* flag, int32_t min) {
  std::vector<int32_t> out;
  for (const std::string& s : split_list(in)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || v < min)
      fail(ErrorKind::invalid_arg, "{} '{}': expected integers >= {} separated by commas", flag, s, min);
    out.push_back(v);
  }
  return out;
}

struct TestShape {
  int32_t n_prompt, n_gen;
};

int bench_main(int argc, char** argv) {
  CLI::App app{"Benchmark prompt processing and generation (llama-bench compatible)", "ferry bench"};
  std::vector<std::string> models, prompts{"512"}, gens{"128"}, pgs, depths{"0"}, threads, ctk{"f16"}, ctv{"f16"};
  int32_t reps = 5, n_batch = 512;
  std::string output = "md";
  bool no_warmup = false;
  std::string depth_fill = "eval";
  RunArgs run;  // the run flags through the sweep adapter (run_args.hpp)
  app.add_option("-m,--model", models, "GGUF model file(s), comma-separated or repeated")->required();
  app.add_option("-p,--n-prompt", prompts, "prompt tokens of the pp tests (0: none)")->capture_default_str();
  app.add_option("-n,--n-gen", gens, "generated tokens of the tg tests (0: none)")->capture_default_str();
  app.add_option("--pg", pgs, "PP,TG: a test of a PP-token prompt then TG generated tokens (-pg; repeatable)");
  app.add_option("-d,--n-depth", depths, "context depth: tokens evaluated (untimed) before each test")
      ->capture_default_str();
  app.add_option("--depth-fill", depth_fill,
                 "how the -d depth is made: eval (evaluated, as llama-bench) or copy (256 tokens "
                 "evaluated, their KV rows copied up to the depth: same attention work, no quadratic "
                 "prefill)")
      ->check(CLI::IsMember({"eval", "copy"}))
      ->capture_default_str();
  app.add_option("-r,--repetitions", reps, "repetitions of each test")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("-t,--threads", threads, "CPU threads (default: physical cores)");
  app.add_option("--cache-type-k", ctk, "KV cache types for K, comma-separated: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 (-ctk)")->capture_default_str();
  app.add_option("--cache-type-v", ctv, "KV cache types for V, comma-separated: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 (-ctv)")->capture_default_str();
  app.add_option("-b,--batch-size", n_batch, "tokens per forward step of the prompt")
      ->check(CLI::Range(1, 65536))->capture_default_str();
  run.add_sweep(app);
  app.add_option("-o,--output", output, "output format: md, csv, json, jsonl")->capture_default_str();
  app.add_flag("--no-warmup", no_warmup, "skip the warm-up run before each test");
  bool kernel_times = false;
  app.add_flag("--kernel-times", kernel_times,
               "cuda: time every kernel with CUDA events and print, per test, a table of GPU time per kernel per "
               "token (Ferry's own; forces --cuda-graphs off; kernels/cuda/kernel_times.hpp)");

  // llama-bench's multi-letter short flags.
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-pg") a = "--pg";
    args.push_back(std::move(a));
  }
  std::vector<char*> ptrs;
  for (auto& s : args) ptrs.push_back(s.data());
  bool stop = false;
  const int rc = parse(app, static_cast<int>(ptrs.size()), ptrs.data(), stop);
  if (stop) return rc;

  const BenchFormat format = parse_bench_format(output);
  const std::vector<std::string> model_list = split_list(models);
  std::vector<TestShape> shapes;
  for (int32_t p : int_list(prompts, "-p", 0))
    if (p > 0) shapes.push_back({p, 0});
  for (int32_t g : int_list(gens, "-n", 0))
    if (g > 0) shapes.push_back({0, g});
  for (const std::string& pg : pgs) {
    const std::vector<int32_t> v = int_list({pg}, "-pg", 0);
    if (v.size() != 2) fail(ErrorKind::invalid_arg, "-pg '{}': expected PP,TG", pg);
    if (v[0] + v[1] > 0) shapes.push_back({v[0], v[1]});
  }
  if (shapes.empty()) fail(ErrorKind::invalid_arg, "no tests: every -p, -n and -pg is 0");
  const std::vector<int32_t> depth_list = int_list(depths, "-d", 0);
  std::vector<int32_t> thread_list = threads.empty() ? std::vector<int32_t>{physical_cores()} : int_list(threads, "-t", 1);
  const std::vector<std::string> ctk_list = split_list(ctk), ctv_list = split_list(ctv);
  for (const auto& s : ctk_list) (void)parse_cache_type(s, "-ctk");
  for (const auto& s : ctv_list) (void)parse_cache_type(s, "-ctv");
  // The sweep's points, each checked by its flag's own parser before anything is loaded.
  auto points = [&](SweepFlag f, std::vector<std::string> fallback) {
    std::vector<std::string> v = run.sweep(f);
    if (v.empty()) v = std::move(fallback);
    RunOptions scratch;
    for (const std::string& x : v) RunArgs::apply_sweep(f, x, scratch);
    return v;
  };
  std::vector<DeviceKind> device_list;
  for (const std::string& d : points(SweepFlag::device, {"cpu"})) {
    RunOptions o;
    RunArgs::apply_sweep(SweepFlag::device, d, o);  // auto: this machine's
    if (std::find(device_list.begin(), device_list.end(), o.device) == device_list.end())
      device_list.push_back(o.device);
  }
  std::vector<std::string> vram_list = points(SweepFlag::vram, {"none"});
  for (std::string& v : vram_list)
    if (v.empty()) v = "none";
  const std::vector<std::string> routing_list = points(SweepFlag::routing, {"model"});
  const std::vector<std::string> decode_list = points(SweepFlag::decode, {"host"});
  if (kernel_times && std::find(device_list.begin(), device_list.end(), DeviceKind::cuda) == device_list.end())
    fail(ErrorKind::invalid_arg, "--kernel-times times CUDA kernels: it needs --device cuda");
  if (kernel_times && format == BenchFormat::csv)
    std::fprintf(stderr, "ferry bench: --kernel-times: csv has no kernel-time rows (md, json and jsonl have)\n");
  if (kernel_times && (run.options.backend.cuda.graphs || run.options.backend.cuda.graph_segments)) {
    // Launches into a graph capture cannot be timed one by one.
    std::fprintf(stderr, "ferry bench: --kernel-times times eager launches: --cuda-graphs off\n");
    run.options.backend.cuda.graphs = run.options.backend.cuda.graph_segments = false;
  }

  // The plan of an offloaded load must hold the largest test of the run.
  int64_t plan_ctx = 1;
  for (const TestShape& s : shapes)
    for (int32_t d : depth_list) plan_ctx = std::max<int64_t>(plan_ctx, int64_t{d} + s.n_prompt + s.n_gen);
  // The placement plans for the largest cache type of each list (bytes per value, blocks included).
  auto largest_type = [](const std::vector<std::string>& list, const char* flag) {
    GgmlType best = GgmlType::F16;
    auto per_value = [](GgmlType t) { return double(type_info(t).block_bytes) / type_info(t).block_values; };
    for (const auto& s : list)
      if (const GgmlType t = parse_cache_type(s, flag); per_value(t) > per_value(best)) best = t;
    return best;
  };
  const GgmlType plan_type_k = largest_type(ctk_list, "-ctk"), plan_type_v = largest_type(ctv_list, "-ctv");

  struct Load {
    std::string model;
    DeviceKind device;
    std::string vram, routing, decode;  // sweep points as given ("none": no budget)
  };
  std::vector<Load> loads;
  for (const auto& m : model_list)
    for (const DeviceKind d : device_list)
      for (const auto& v : vram_list) {
        const bool budget = v != "none";
        if (d == DeviceKind::cpu && budget) {
          std::fprintf(stderr, "ferry bench: --vram %s does not apply to --device cpu: skipped\n", v.c_str());
          continue;
        }
        // The decode flow applies to offloaded cuda loads (and sim's device flow); others run once.
        const bool flows = (d == DeviceKind::cuda && budget) || d == DeviceKind::sim;
        for (const auto& r : routing_list)
          for (size_t i = 0; i < (flows ? decode_list.size() : 1); ++i)
            loads.push_back({m, d, v, r, flows ? decode_list[i] : "host"});
      }
  const size_t per_load = thread_list.size() * ctk_list.size() * ctv_list.size() * depth_list.size() * shapes.size();
  const size_t total = loads.size() * per_load;

  BenchPrinter printer(format, stdout);
  printer.header();
  std::map<int32_t, double> host_bw;  // measured once per thread count
  size_t index = 0;
  int failures = 0;
  for (const Load& L : loads) {
    BenchLoadSpec spec;
    spec.model = L.model;
    spec.run = run.options;
    spec.run.device = L.device;
    RunArgs::apply_sweep(SweepFlag::vram, L.vram, spec.run);
    RunArgs::apply_sweep(SweepFlag::routing, L.routing, spec.run);
    RunArgs::apply_sweep(SweepFlag::decode, L.decode, spec.run);
    spec.routing = L.routing;
    spec.plan_ctx = plan_ctx;
    spec.plan_type_k = plan_type_k;
    spec.plan_type_v = plan_type_v;
    spec.n_batch = n_batch;
    std::string what = fmt::format("{} on {}", L.model, device_kind_name(L.device));
    if (L.vram != "none") what += fmt::format(" --vram {}", L.vram);
    if (L.routing != "model") what += fmt::format(" --routing {}", L.routing);
    if (L.decode != "host") what += fmt::format(" --offload-decode {}", L.decode);
    std::unique_ptr<BenchModel> bm;
    try {
      bm = std::make_unique<BenchModel>(spec);
    } catch (const Error& e) {
      std::fprintf(stderr, "ferry bench: %s: cannot run: %s\n", what.c_str(), e.what());
      failures += static_cast<int>(per_load);
      index += per_load;
      continue;
    }
    std::optional<double> device_bw;
    if (L.device == DeviceKind::cuda && bm->loaded().device()) device_bw = measure_device_copy_gbps(*bm->loaded().device());
    for (int32_t nt : thread_list) {
      ThreadLimit limit(nt);
      std::optional<double> bw = device_bw;
      if (L.device != DeviceKind::cuda) {
        if (!host_bw.count(nt)) {
          host_bw[nt] = measure_host_read_gbps();
          std::fprintf(stderr, "ferry bench: host memory read bandwidth with %d threads: %.1f GB/s (best of 5 passes over %zu MiB)\n",
                       nt, host_bw[nt], probe_bytes() >> 20);
        }
        bw = host_bw[nt];
      }
      for (const auto& tk : ctk_list)
        for (const auto& tv : ctv_list)
          for (int32_t d : depth_list)
            for (const TestShape& s : shapes) {
              BenchTestSpec t;
              t.n_prompt = s.n_prompt;
              t.n_gen = s.n_gen;
              t.n_depth = d;
              t.n_threads = nt;
              t.type_k = tk;
              t.type_v = tv;
              t.reps = reps;
              t.warmup = !no_warmup;
              t.depth_by_copy = depth_fill == "copy";
              t.kernel_times = kernel_times && L.device == DeviceKind::cuda;
              ++index;
              BenchResult probe;
              probe.n_prompt = s.n_prompt;
              probe.n_gen = s.n_gen;
              probe.n_depth = d;
              const std::string progress =
                  fmt::format("ferry bench: {}/{} {} t={} {}", index, total, probe.test_name(), nt, what);
              try {
                printer.add(bm->run(t, bw, progress));
              } catch (const Error& e) {
                std::fprintf(stderr, "%s: failed: %s\n", progress.c_str(), e.what());
                ++failures;
              }
            }
    }
  }
  printer.footer();
  if (failures > 0) std::fprintf(stderr, "ferry bench: %d of %zu runs failed\n", failures, total);
  return failures > 0 ? 1 : 0;
}

}  // namespace

FERRY_COMMAND("bench", "benchmark prompt processing and generation (llama-bench compatible)", bench_main);

}  // namespace ferry::cli
