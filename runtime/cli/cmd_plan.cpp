// `ferry plan`: will a model fit, how much of it sits in VRAM, and how fast would Ferry and
// llama.cpp run it, per card. Sizes are exact (the session's and the placement's own code);
// speeds are the offload simulator's estimates (docs/simulator.md), marked as such.
#include <cstdio>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "runtime/backend/device_size.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/plan_args.hpp"
#include "runtime/cli/plan_cards.hpp"
#include "runtime/core/error.hpp"

namespace {

using namespace ferry;
using namespace ferry::cli;
using nlohmann::json;

double gib(uint64_t b) { return static_cast<double>(b) / double(1ull << 30); }

// Experts by size class: distinct per-layer expert sizes, with their layers (placement.hpp).
std::vector<SlotClass> expert_classes(const ModelSizes& m) {
  return sim_plan(m.sim, 0).classes;
}

std::string tps(const Estimate& e, bool with_band) {
  if (!e.fits) return "-";
  if (with_band && e.tg_high > e.tg_low * 1.0005) return fmt::format("~{:.0f}-{:.0f}", e.tg_low, e.tg_high);
  return fmt::format("~{:.0f}", e.tg);
}

void print_sizes(const ModelSizes& m, const PlanArgs& a, double load_gbps) {
  std::printf("model: %s (%s), %.2f B params\n", m.name.c_str(), m.arch.c_str(), double(m.n_params) / 1e9);
  std::printf("  weights      %8.2f GiB  (%llu bytes: every tensor, exact)\n", gib(m.weights_bytes),
              static_cast<unsigned long long>(m.weights_bytes));
  std::printf("  dense        %8.2f GiB  (everything but routed experts: always on the GPU)\n", gib(m.dense_bytes));
  std::printf("  experts      %8.2f GiB  (%d layers x %d experts, top-%d)\n", gib(m.expert_bytes),
              m.sim.n_layer, m.sim.n_expert, m.sim.top_k);
  for (const SlotClass& c : expert_classes(m))
    std::printf("    class      %8.2f GiB  %zu layers x %d experts of %.2f MiB\n",
                gib(c.expert_bytes * c.layers.size() * uint64_t(m.sim.n_expert)), c.layers.size(),
                m.sim.n_expert, double(c.expert_bytes) / 1048576.0);
  std::printf("context: -c %lld, -ctk %s, -ctv %s, -np %d\n", static_cast<long long>(m.n_ctx),
              a.cache_type_k.c_str(), a.cache_type_v.c_str(), a.parallel);
  std::printf("  KV cache     %8.3f GiB  (%llu bytes, as the session allocates it)\n", gib(m.kv_bytes),
              static_cast<unsigned long long>(m.kv_bytes));
  std::printf("  state        %8.3f GiB  (recurrent state)\n", gib(m.state_bytes));
  std::printf("  workspace    %8.3f GiB  (forward %.3f + offload step buffers %.3f)\n",
              gib(m.workspace_bytes + m.step_bytes), gib(m.workspace_bytes), gib(m.step_bytes));
  std::printf("VRAM to hold everything: %.2f GiB + overhead (estimate: the CUDA context and the 1 GiB "
              "free margin llama.cpp's fit keeps)\n",
              gib(m.dense_bytes + m.expert_bytes + m.kv_bytes + m.state_bytes + m.workspace_bytes));
  std::printf("host: pinned expert store %.2f GiB; RAM needed %.2f GiB (store + dense weights mapped "
              "while they upload); load ~%.0f s (estimate: store at %.1f GB/s)\n",
              gib(m.expert_bytes), gib(m.expert_bytes + m.dense_bytes),
              double(m.expert_bytes) / (load_gbps * 1e9), load_gbps);
}

void print_cards(const std::vector<CardRow>& rows) {
  std::printf("\nwhich GPUs can run it (tok/s are simulator estimates; a range is the band over the card's "
              "plausible hosts):\n");
  std::printf("%-16s %6s %5s %8s %8s %12s %12s %14s  %s\n", "gpu", "VRAM", "fits", "experts", "max ctx",
              "ferry tg", "llama fit tg", "llama ncmoe tg", "ferry / best llama.cpp: tg, pp (>1: faster)");
  for (const CardRow& r : rows) {
    const std::string nc = r.llamacpp_ncmoe.fits
                               ? fmt::format("{} (-ncmoe {})", tps(r.llamacpp_ncmoe, true),
                                             r.llamacpp_ncmoe.n_cpu_moe)
                               : "-";
    const double tg = r.ferry_vs_llamacpp_tg(), pp = r.ferry_vs_llamacpp_pp();
    const std::string vs = tg > 0 ? fmt::format("{:.2f}x, {:.2f}x", tg, pp) : "-";
    std::printf("%-16s %5.0fG %5s %7.0f%% %8lld %12s %12s %14s  %s\n", r.gpu.c_str(), gib(r.vram_bytes),
                r.fits ? "yes" : "no", 100.0 * r.experts_on_gpu_fraction,
                static_cast<long long>(r.max_context), tps(r.ferry, true).c_str(),
                tps(r.llamacpp_fit, true).c_str(), nc.c_str(), vs.c_str());
  }
}

json estimate_json(const Estimate& e, const char* which) {
  json j = {{"fits", e.fits}, {"tg_tps", e.tg}, {"pp_tps", e.pp}, {"estimate", true}};
  if (e.tg_high > e.tg_low) {
    j["tg_tps_low"] = e.tg_low, j["tg_tps_high"] = e.tg_high;
    j["pp_tps_low"] = e.pp_low, j["pp_tps_high"] = e.pp_high;
  }
  if (std::string(which) == "ferry") j["hit_rate"] = e.hit_rate;
  if (std::string(which) == "llamacpp_ncmoe") j["n_cpu_moe"] = e.n_cpu_moe;
  if (!e.note.empty()) j["note"] = e.note;
  return j;
}

json plan_json(const ModelSizes& m, const PlanArgs& a, const std::vector<CardRow>& rows, double load_gbps) {
  json classes = json::array();
  for (const SlotClass& c : expert_classes(m))
    classes.push_back({{"expert_bytes", c.expert_bytes}, {"layers", c.layers.size()}});
  json j;
  j["model"] = {{"name", m.name},
                {"arch", m.arch},
                {"n_params", m.n_params},
                {"weights_bytes", m.weights_bytes},
                {"expert_bytes", m.expert_bytes},
                {"dense_bytes", m.dense_bytes},
                {"expert_classes", classes}};
  j["context"] = {{"n_ctx", m.n_ctx},         {"type_k", a.cache_type_k},
                  {"type_v", a.cache_type_v}, {"n_parallel", a.parallel},
                  {"kv_bytes", m.kv_bytes},   {"state_bytes", m.state_bytes},
                  {"workspace_bytes", m.workspace_bytes + m.step_bytes}};
  j["host"] = {{"pinned_expert_bytes", m.expert_bytes},
               {"ram_bytes", m.expert_bytes + m.dense_bytes},
               {"load_seconds_estimate", double(m.expert_bytes) / (load_gbps * 1e9)}};
  json cards = json::array();
  for (const CardRow& r : rows) {
    cards.push_back({{"gpu", r.gpu},
                     {"host", r.hosts.size() == 1 ? json(r.hosts[0]) : json(r.hosts)},
                     {"vram_bytes", r.vram_bytes},
                     {"budget_bytes", r.budget_bytes},
                     {"fits", r.fits},
                     {"experts_on_gpu_fraction", r.experts_on_gpu_fraction},
                     {"max_context", r.max_context},
                     {"estimates",
                      {{"ferry", estimate_json(r.ferry, "ferry")},
                       {"llamacpp_fit", estimate_json(r.llamacpp_fit, "llamacpp_fit")},
                       {"llamacpp_ncmoe", estimate_json(r.llamacpp_ncmoe, "llamacpp_ncmoe")}}}});
    if (r.ferry_vs_llamacpp_tg() > 0)
      cards.back()["ferry_vs_llamacpp"] = {{"tg_ratio", r.ferry_vs_llamacpp_tg()},
                                           {"pp_ratio", r.ferry_vs_llamacpp_pp()},
                                           {"estimate", true}};
  }
  j["cards"] = cards;
  return j;
}

int run_plan(int argc, char** argv) {
  CLI::App app{
      "Will a MoE model fit, and how fast would it run? Exact sizes (weights, experts by size class, "
      "KV cache, recurrent state, workspace) for a GGUF (-m) or a synthetic model (--arch --preset "
      "--quant), and per GPU profile: does it fit, the share of experts in VRAM, the largest "
      "context, and the offload simulator's estimated tok/s for Ferry and for llama.cpp (fit, "
      "best -ncmoe). --gpu NAME shows one card in detail.",
      "ferry plan"};
  PlanArgs a;
  bool as_json = false;
  std::string routing = "locality", free_mem;
  int64_t n_decode = 64, n_prompt = 512;
  add_plan_args(app, a, false);
  app.add_option("--routing", routing, "simulated routing: uniform | locality | locality:FILE | trace:FILE | profile:FILE")
      ->capture_default_str();
  app.add_option("-n,--n-predict", n_decode, "decoded tokens simulated per estimate")->capture_default_str();
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens simulated per estimate (pp)")->capture_default_str();
  app.add_option("--free", free_mem,
                 "with --gpu: the card's free device memory when the engines start (e.g. 15.5G; "
                 "default: its VRAM), as on a card partly taken; llama.cpp's placements and Ferry's "
                 "budget (free - the 1 GiB fit margin) see it");
  app.add_flag("--json", as_json, "print the plan as JSON");
  bool stop = false;
  const int rc = parse_plan_command(app, argc, argv, stop);
  if (stop) return rc;

  const gguf::File f = open_plan_model(a);
  const ModelSizes m = model_sizes(f, plan_request(a));
  const std::string dir = profiles_dir(a);
  const HardwareProfile params = simulator_params(dir);
  double load_gbps = params.number("store_load_gbps");
  CardOptions co;
  co.sim.routing = parse_sim_routing(routing);
  co.sim.n_decode = n_decode;
  co.sim.n_prompt = n_prompt;
  co.sim.n_batch = a.batch;
  co.ctx_set_by_user = a.ctx > 0;
  if (!free_mem.empty() && a.gpu.empty()) fail(ErrorKind::invalid_arg, "--free needs --gpu NAME (one card)");
  if (!free_mem.empty()) co.free_bytes = parse_size(free_mem);
  std::vector<CardRow> rows;
  if (!a.gpu.empty()) {
    const HardwareProfile gpu = find_hardware_profile(dir, ProfileKind::gpu, a.gpu);
    const std::vector<HardwareProfile> hosts = hosts_for(dir, gpu, a.host);
    // One card: its first host's measured store fill rate where the profile has one.
    load_gbps = hosts.at(0).number_or("store_load_gbps", load_gbps);
    rows.push_back(card_row(m, gpu, hosts, params, co));
  } else {
    for (const HardwareProfile& gpu : list_hardware_profiles(dir, ProfileKind::gpu))
      rows.push_back(card_row(m, gpu, hosts_for(dir, gpu, a.host), params, co));
  }
  if (as_json) {
    std::printf("%s\n", plan_json(m, a, rows, load_gbps).dump(2).c_str());
    return 0;
  }
  print_sizes(m, a, load_gbps);
  print_cards(rows);
  if (!a.gpu.empty()) {
    const CardRow& r = rows[0];
    std::printf("\n%s on host %s, budget %.2f GiB (%s - the 1 GiB fit margin), routing %s; every "
                "speed below is an estimate:\n",
                r.gpu_name.c_str(), r.hosts[0].c_str(), gib(r.budget_bytes),
                free_mem.empty() ? "VRAM" : "free memory", routing.c_str());
    if (r.fits) std::fputs(plan_text(r.plan).c_str(), stdout);
    for (const SimResult& s : r.detail) std::fputs(sim_result_text(s).c_str(), stdout);
  }
  return 0;
}

FERRY_COMMAND("plan", "will a model fit, and how fast (sizes exact, speeds simulated) per GPU", run_plan);

}  // namespace
