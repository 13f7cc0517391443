#include "runtime/cli/offload_args.hpp"

#include <cstdio>

#include "runtime/backend/cuda_ops.hpp"

namespace ferry::cli {

void add_offload_args(CLI::App& app, OffloadArgs& a) {
  app.add_option("--device", a.device,
                 "where routed experts run: cpu, sim (offload engine on the host), cuda, auto")
      ->check(CLI::IsMember({"cpu", "sim", "cuda", "auto"}));
  app.add_option("--vram", a.vram,
                 "device memory budget, e.g. 16G, 512M (default: every expert resident)");
  app.add_flag("--print-plan", a.print_plan, "print the VRAM placement plan");
  app.add_option("--plan-json", a.plan_json, "write the placement plan as JSON");
  app.add_option("--profile", a.profile,
                 "activation profile (per-layer expert frequencies) for the initial hot set");
  app.add_option("--record-profile", a.record_profile, "write this run's activation profile");
  app.add_option("--host-load", a.host_load,
                 "fill the host expert store by uring or mmap (copies into pinned memory), registered (the mapping page-locked in place) or alias (the mapping as it is)")
      ->check(CLI::IsMember({"uring", "mmap", "registered", "alias"}));
  app.add_option("--cold", a.cold, "cold experts: auto (cost model), cpu, copy, mapped (decode misses read in place from pinned host memory; device flow)")
      ->check(CLI::IsMember({"auto", "cpu", "copy", "mapped"}));
  app.add_option("--evict", a.evict, "expert cache eviction: lrfu, lru")
      ->check(CLI::IsMember({"lrfu", "lru"}));
  app.add_option("--prefetch", a.prefetch,
                 "layers ahead to predict and prefetch (0: off); --stats measures the predictor at this depth (2 when 0)")
      ->check(CLI::Range(0, 8));
  app.add_option("--sim-link", a.sim_link,
                 "sim device link model GBPS[:LATENCY_US] (0: memcpy speed)");
  app.add_option("--hw-profile", a.hw_profile,
                 "cost-model rates from a hardware profile JSON (default: calibrate)");
  app.add_option("--offload-decode", a.decode,
                 "cuda decode steps: host (routing copied to the host per MoE step: CPU experts, cost model, "
                 "prediction) or table (device tables, no host sync, one CUDA graph a token with --cuda-graphs on; misses read in "
                 "place from pinned host memory and admitted behind)")
      ->check(CLI::IsMember({"host", "table"}));
  app.add_flag("--offload-stats", a.stats, "print the offload executor's counters at the end");
}

void print_offload_stats(LoadedModel& m) {
  m.moe().finish();
  OffloadExecutor* ex = m.moe().offload();
  if (!m.moe().options().offload.stats || !ex) return;
  std::fputs(offload_stats_text(ex->stats()).c_str(), stderr);
  if (std::string_view(m.ops().name()) == "cuda") {
    const CudaGraphStats g = cuda_ops_graph_stats(m.ops());
    std::fprintf(stderr, "offload: cuda graphs %s: %llu launched, %llu instantiated%s\n", g.enabled ? "on" : "off",
                 static_cast<unsigned long long>(g.launches), static_cast<unsigned long long>(g.instantiations),
                 g.launches || !g.enabled
                     ? ""
                     : " (offloaded decode is recorded with --offload-decode table, or around its MoE steps "
                       "with --cuda-graphs segments)");
  }
}

}  // namespace ferry::cli
