// `ferry simulate`: the offload engine's decisions for a model on a GPU profile, in virtual time
// (offload/simulate.hpp), with llama.cpp's fit and best -ncmoe in the same model. Deterministic:
// the same flags print the same bytes and write the same trace.
#include <cstdio>

#include <fmt/format.h>

#include "offload/simulate_cache.hpp"
#include "offload/simulate_llamacpp.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/plan_args.hpp"
#include "runtime/cli/plan_cards.hpp"
#include "runtime/core/error.hpp"

namespace {

using namespace ferry;
using namespace ferry::cli;

int run_simulate(int argc, char** argv) {
  CLI::App app{
      "Simulate the offload engine in virtual time: the engine's own placement, expert cache, "
      "decide(), cost model, prefetcher and admissions, driven by simulated routing, with "
      "durations from a GPU and a host profile. Prints what --stats and --offload-stats print "
      "(hit rate, H2D per token, GPU wait by cause) and llama.cpp's fit and best -ncmoe in the same "
      "model; every speed is an estimate (docs/simulator.md).",
      "ferry simulate"};
  PlanArgs a;
  std::string routing = "locality", vram, free_mem, cold = "auto", evict = "lrfu", trace, strategies = "all";
  int64_t n_decode = 64, n_prompt = 512;
  int32_t prefetch = 0, ncmoe = -1;
  int64_t slots = 0, fit_ctx = -1;
  int32_t llama_cache = 0, projection_lru = 0;
  uint64_t seed = 1;
  bool no_admit = false;
  add_plan_args(app, a, true);
  app.add_option("--routing", routing, "uniform | locality | locality:FILE | trace:FILE | profile:FILE")
      ->capture_default_str();
  app.add_option("--routing-seed", seed, "seed of the generated routing (as ferry run's)")->capture_default_str();
  app.add_option("-n,--n-predict", n_decode, "decoded tokens")->capture_default_str();
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens (prefill, in -b batches)")->capture_default_str();
  app.add_option("--vram", vram, "Ferry's budget (e.g. 15G; default: the card's VRAM - the 1 GiB fit margin)");
  app.add_option("--free", free_mem,
                 "the card's free device memory when the engines start (e.g. 15.5G; default: its "
                 "VRAM): what llama.cpp's placements and Ferry's default budget (free - the 1 GiB "
                 "fit margin) see on a card partly taken, as a ballast run's");
  app.add_option("--cold", cold, "auto | cpu | copy (as ferry run; mapped is not modelled)")->capture_default_str();
  app.add_option("--evict", evict, "lru | lrfu")->capture_default_str();
  app.add_option("--prefetch", prefetch, "predictor depth (prev + freq predictions; 0 = none)")
      ->capture_default_str();
  app.add_flag("--no-admit", no_admit, "do not copy decode misses computed on the CPU into slots behind");
  app.add_option("--slots", slots, "Ferry's budget: the smallest holding N expert slots (instead of --vram)");
  app.add_option("--ncmoe", ncmoe, "llama.cpp: this -ncmoe N instead of the best N that fits");
  app.add_option("--fit-ctx", fit_ctx,
                 "llama.cpp fit: the context it starts from, not set by the user (0: the model's "
                 "trained context, llama.cpp's default; default: -c, as set by the user)");
  app.add_option("--llamacpp-cache", llama_cache,
                 "llama.cpp's -ncmoe run with a static VRAM cache of N whole experts per layer in "
                 "front of its host-resident ones (thecodacus/llama.cpp#5: each layer's N most-routed "
                 "experts of a 512-token routing profile on the GPU, the rest on the CPU)");
  app.add_option("--projection-lru", projection_lru,
                 "also print the hit rate of a cold per-layer LRU of N projection slots (gate, up or "
                 "down of one expert; kekzl/imp#1374's cache, used in its code's order: a token's gates, "
                 "then ups, then downs) over the -n decoded tokens after the -p prompt tokens");
  app.add_option("--trace", trace, "write a Perfetto trace of Ferry's run in virtual time");
  app.add_option("--strategy", strategies, "all | ferry | llamacpp (fit and best -ncmoe) | none (only --projection-lru)")->capture_default_str();
  bool stop = false;
  const int rc = parse_plan_command(app, argc, argv, stop);
  if (stop) return rc;
  if (strategies != "all" && strategies != "ferry" && strategies != "llamacpp" && strategies != "none")
    fail(ErrorKind::invalid_arg, "--strategy '{}' (all, ferry, llamacpp or none)", strategies);
  if (n_decode < 0 || n_prompt < 0) fail(ErrorKind::invalid_arg, "-n and -p must not be negative");

  const gguf::File f = open_plan_model(a);
  const ModelSizes m = model_sizes(f, plan_request(a));
  const std::string dir = profiles_dir(a);
  const HardwareProfile params = simulator_params(dir);
  const HardwareProfile gpu = find_hardware_profile(dir, ProfileKind::gpu, a.gpu);
  const std::vector<HardwareProfile> hosts = hosts_for(dir, gpu, a.host);
  SimOptions o;
  o.routing = parse_sim_routing(routing, seed);
  o.n_decode = n_decode;
  o.n_prompt = n_prompt;
  o.n_batch = a.batch;
  o.cold = parse_named(kColdModes, cold, "--cold");
  if (o.cold == ColdMode::mapped)
    fail(ErrorKind::unsupported, "--cold mapped: reading experts in place is not modelled by the simulator");
  o.policy = parse_named(kEvictionPolicies, evict, "--evict");
  o.prefetch = prefetch;
  o.admit = !no_admit;
  o.trace_path = trace;
  if (projection_lru > 0) {
    // The hit rate depends on the routing only: one line for every host.
    const ProjectionLruResult lru = projection_lru_hit_rate(m.sim, o.routing, projection_lru, n_prompt, n_decode);
    std::printf("projection LRU: %d slots per layer, cold, -p %lld -n %lld: decode hit rate %.1f%% (%llu "
                "uses; with the prompt's uses %.1f%%)\n",
                projection_lru, static_cast<long long>(n_prompt), static_cast<long long>(n_decode),
                100 * lru.decode_hit_rate, static_cast<unsigned long long>(lru.decode_uses),
                100 * lru.all_hit_rate);
  }
  const uint64_t card = card_memory(gpu, free_mem.empty() ? 0 : parse_size(free_mem));
  for (size_t i = 0; i < hosts.size(); ++i) {
    const SimRates r = sim_rates(gpu, hosts[i], params);
    o.budget_bytes = slots > 0       ? sim_budget_for_slots(m.sim, slots)
                     : !vram.empty() ? parse_size(vram)
                     : card > r.fit_margin_bytes ? card - r.fit_margin_bytes
                                                 : 0;
    if (i > 0) o.trace_path.clear();  // the trace is the first host's run
    const std::string steps = o.routing.mode == SimRoutingMode::trace
                                  ? std::string("the trace's steps")
                                  : fmt::format("-p {} -n {}", n_prompt, n_decode);
    std::printf("simulate: %s + %s, %s, routing %s, budget %.2f GiB, %s (every speed an estimate)\n",
                gpu.id.c_str(), hosts[i].id.c_str(), m.name.c_str(), sim_routing_name(o.routing).c_str(),
                double(o.budget_bytes) / double(1ull << 30), steps.c_str());
    std::printf("rates: memory %.0f GB/s, link %.1f GB/s (llama.cpp's pageable uploads %.1f), CPU experts "
                "%.1f GB/s, prefill %.0f GFLOP/s (llama.cpp %.0f), launch %.1f us, sync %.1f us\n",
                r.mem_gbps, r.link_gbps, r.llama_upload_gbps, r.cpu_gbps, r.prefill_gflops,
                r.llama_prefill_gflops, r.launch_us, r.sync_us);
    if (strategies == "all" || strategies == "ferry") {
      try {
        std::fputs(sim_result_text(simulate_ferry(m.sim, r, o)).c_str(), stdout);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::budget) throw;
        std::printf("ferry: does not fit: %s\n", e.what());
      }
    }
    if (strategies == "all" || strategies == "llamacpp") {
      const bool user_ctx = fit_ctx < 0;
      const int64_t start_ctx = fit_ctx < 0 ? 0 : fit_ctx == 0 ? m.n_ctx_train : fit_ctx;
      const LlamaPlacement fit = llamacpp_fit(m.sim, r, card, user_ctx, start_ctx);
      LlamaPlacement nc =
          ncmoe >= 0 ? llamacpp_ncmoe(m.sim, r, ncmoe, card) : llamacpp_best_ncmoe(m.sim, r, card);
      nc.cache_slots = llama_cache;
      std::fputs(sim_result_text(simulate_llamacpp(m.sim, r, fit, o, SimStrategy::llamacpp_fit)).c_str(), stdout);
      std::fputs(sim_result_text(simulate_llamacpp(m.sim, r, nc, o, SimStrategy::llamacpp_ncmoe)).c_str(), stdout);
    }
  }
  return 0;
}

FERRY_COMMAND("simulate", "simulate the offload engine (and llama.cpp) on a GPU profile in virtual time",
              run_simulate);

}  // namespace
