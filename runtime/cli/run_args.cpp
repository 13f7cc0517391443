#include "runtime/cli/run_args.hpp"

#include <algorithm>
#include <functional>
#include <optional>

#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/named.hpp"

namespace ferry::cli {
namespace {

// Groups of flags: ferry bench takes the per-load ones, not the per-run outputs.
enum class Group { device, engine, engine_output, routing, observe_output, backend };

using Apply = std::function<void(RunOptions&, const std::string&)>;

struct Flag {
  const char* names;  // CLI11's "-x,--long" form
  const char* help;
  Group group;
  bool is_switch;                    // a flag without a value (apply gets "")
  std::optional<SweepFlag> sweep;    // ferry bench sweeps it
  const char* default_text;          // shown by --help ("" for none)
  Apply apply;
};

// "auto" is resolved before the table is read (default_device_kind, only when auto is what the
// flag says); its entry is there for the list of spellings an error names.
constexpr std::array<Named<DeviceKind>, 4> kDeviceChoices{
    {{"cpu", DeviceKind::cpu}, {"sim", DeviceKind::sim}, {"cuda", DeviceKind::cuda}, {"auto", DeviceKind::cpu}}};

constexpr std::array<Named<bool>, 2> kOnOff{{{"on", true}, {"off", false}}};

enum class CudaGraphs { off, on, segments };
constexpr std::array<Named<CudaGraphs>, 3> kCudaGraphs{
    {{"off", CudaGraphs::off}, {"on", CudaGraphs::on}, {"segments", CudaGraphs::segments}}};

enum class GdnPrefillChoice { auto_, chunked, recurrent };
constexpr std::array<Named<GdnPrefillChoice>, 3> kGdnPrefill{{{"auto", GdnPrefillChoice::auto_},
                                                              {"chunked", GdnPrefillChoice::chunked},
                                                              {"recurrent", GdnPrefillChoice::recurrent}}};

SimLinkModel parse_sim_link(const std::string& s) {
  SimLinkModel m;
  try {
    size_t used = 0;
    const size_t colon = s.find(':');
    const std::string gbps = s.substr(0, colon);
    m.h2d_gbps = std::stod(gbps, &used);
    if (used != gbps.size()) throw std::invalid_argument("trailing");
    if (colon != std::string::npos) {
      const std::string lat = s.substr(colon + 1);
      m.latency_us = std::stod(lat, &used);
      if (used != lat.size()) throw std::invalid_argument("trailing");
    }
  } catch (const std::exception&) {
    fail(ErrorKind::invalid_arg, "--sim-link '{}': expected GBPS or GBPS:LATENCY_US (e.g. 13:10)", s);
  }
  if (!(m.h2d_gbps >= 0) || !(m.latency_us >= 0))
    fail(ErrorKind::invalid_arg, "--sim-link '{}': negative figures", s);
  m.d2h_gbps = m.h2d_gbps;
  return m;
}

int32_t parse_int(const std::string& s, const char* flag, int32_t lo, int32_t hi) {
  int v = 0;
  size_t used = 0;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < lo || v > hi)
    fail(ErrorKind::invalid_arg, "{} '{}': expected an integer in {}..{}", flag, s, lo, hi);
  return v;
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      // --- device and budget (the run plan: runtime/engine/run_options.hpp)
      {"--device",
       "where the model runs: cpu, sim (offload engine on the host), cuda, auto (cuda when a GPU exists; an "
       "emulator build only when FERRY_CUDA_EMU_MEMORY sets its card)",
       Group::device, false, SweepFlag::device, "auto",
       [](RunOptions& o, const std::string& v) {
         o.device = v == "auto" ? default_device_kind() : parse_named(kDeviceChoices, v, "--device");
       }},
      {"--vram", "device memory budget, e.g. 16G, 512M (default: every expert resident)", Group::device, false,
       SweepFlag::vram, "",
       [](RunOptions& o, const std::string& v) {
         if (v == "none") o.vram_bytes.reset();  // a sweep's unconstrained point
         else o.vram_bytes = parse_size(v);
       }},
      {"--fit", "cuda without --vram: fit the budget to the card's free memory, offloading what does not fit "
       "(off: every expert resident, the budget all free memory)",
       Group::device, false, {}, "on",
       [](RunOptions& o, const std::string& v) { o.fit.enabled = parse_named(kOnOff, v, "--fit"); }},
      {"--fit-target", "MiB the fit leaves free on the card (-fitt)", Group::device, false, {}, "1024",
       [](RunOptions& o, const std::string& v) {
         o.fit.target_bytes = static_cast<uint64_t>(parse_int(v, "--fit-target", 0, 1 << 20)) << 20;
       }},
      {"--fit-ctx", "the smallest default context the fit may shrink to when the dense part does not fit (-fitc)",
       Group::device, false, {}, "512",
       [](RunOptions& o, const std::string& v) { o.fit.min_ctx = parse_int(v, "--fit-ctx", 16, 1 << 30); }},
      // --- the offload engine
      {"--profile", "activation profile (per-layer expert frequencies) for the initial hot set", Group::engine,
       false, {}, "", [](RunOptions& o, const std::string& v) { o.offload.profile = v; }},
      {"--host-load",
       "fill the host expert store by uring or mmap (copies into pinned memory), registered (the mapping "
       "page-locked in place) or alias (the mapping as it is)",
       Group::engine, false, {}, "",
       [](RunOptions& o, const std::string& v) { o.offload.host_load = parse_named(kHostLoads, v, "--host-load"); }},
      {"--cold",
       "cold experts: auto (cost model), cpu, copy, mapped (decode misses read in place from pinned host memory; "
       "device flow)",
       Group::engine, false, {}, "auto",
       [](RunOptions& o, const std::string& v) { o.offload.cold = parse_named(kColdModes, v, "--cold"); }},
      {"--evict", "expert cache eviction: lrfu, lru", Group::engine, false, {}, "lrfu",
       [](RunOptions& o, const std::string& v) { o.offload.evict = parse_named(kEvictionPolicies, v, "--evict"); }},
      {"--prefetch",
       "layers ahead to predict and prefetch (0: off); --stats measures the predictor at this depth (2 when 0)",
       Group::engine, false, {}, "0",
       [](RunOptions& o, const std::string& v) { o.offload.prefetch = parse_int(v, "--prefetch", 0, 8); }},
      {"--sim-link", "sim device link model GBPS[:LATENCY_US] (0: memcpy speed)", Group::engine, false, {}, "13:10",
       [](RunOptions& o, const std::string& v) { o.offload.sim_link = parse_sim_link(v); }},
      {"--hw-profile", "cost-model rates from a hardware profile JSON (default: calibrate)", Group::engine, false,
       {}, "", [](RunOptions& o, const std::string& v) { o.offload.hw_profile = v; }},
      {"--offload-decode",
       "offloaded decode steps: host (routing copied to the host per MoE step: CPU experts, cost model, "
       "prediction) or table (device tables, no host sync, one CUDA graph a token with --cuda-graphs on; misses "
       "read in place from pinned host memory and admitted behind)",
       Group::engine, false, SweepFlag::decode, "host",
       [](RunOptions& o, const std::string& v) { o.offload.decode = parse_named(kDecodeModes, v, "--offload-decode"); }},
      // --- the offload engine's per-run outputs
      {"--print-plan", "print the VRAM placement plan", Group::engine_output, true, {}, "",
       [](RunOptions& o, const std::string&) { o.offload.print_plan = true; }},
      {"--plan-json", "write the placement plan as JSON", Group::engine_output, false, {}, "",
       [](RunOptions& o, const std::string& v) { o.offload.plan_json = v; }},
      {"--record-profile", "write this run's activation profile", Group::engine_output, false, {}, "",
       [](RunOptions& o, const std::string& v) { o.offload.record_profile = v; }},
      {"--offload-stats", "print the offload executor's counters at the end", Group::engine_output, true, {}, "",
       [](RunOptions& o, const std::string&) { o.offload.stats = true; }},
      // --- routing
      {"--routing",
       "expert choice: model (the router's), uniform, locality (Qwen3-30B-A3B-like temporal locality), "
       "locality:FILE (the same process with the per-layer statistics of a --record-routing trace), or "
       "trace:FILE (replay --record-routing output); see docs/routing.md",
       Group::routing, false, SweepFlag::routing, "model",
       [](RunOptions& o, const std::string& v) {
         o.observe.routing = parse_routing_spec(v, o.observe.routing.seed);
       }},
      {"--routing-seed", "seed of --routing uniform|locality", Group::routing, false, {}, "1",
       [](RunOptions& o, const std::string& v) {
         size_t used = 0;
         uint64_t seed = 0;
         try {
           seed = std::stoull(v, &used);
         } catch (const std::exception&) {
           used = 0;
         }
         if (used == 0 || used != v.size() || v[0] == '-')
           fail(ErrorKind::invalid_arg, "--routing-seed '{}': expected a non-negative integer", v);
         o.observe.routing.seed = seed;
       }},
      // --- observability outputs
      {"--record-routing", "write the routing of this run to FILE (FRRT format)", Group::observe_output, false, {},
       "", [](RunOptions& o, const std::string& v) { o.observe.record_routing = v; }},
      {"--stats",
       "print routing locality with a reuse-distance histogram, prediction precision/recall (depth: --prefetch, or "
       "2) and offload counters at the end",
       Group::observe_output, true, {}, "", [](RunOptions& o, const std::string&) { o.observe.stats = true; }},
      {"--trace",
       "write a Chrome/Perfetto trace (JSON) of ops, MoE steps and (offload) expert copies, waits and expert "
       "compute to FILE",
       Group::observe_output, false, {}, "", [](RunOptions& o, const std::string& v) { o.observe.trace = v; }},
      // --- backend switches
      {"--cuda-graphs",
       "cuda: one-token steps as CUDA graphs: off (kernel by kernel; measured faster on an H200), on, segments "
       "(also the offloaded steps, recorded around their MoE steps); bench/results/2026-12-04-gpu-check-h200*.md",
       Group::backend, false, {}, "off",
       [](RunOptions& o, const std::string& v) {
         const CudaGraphs g = parse_named(kCudaGraphs, v, "--cuda-graphs");
         o.backend.cuda.graphs = g != CudaGraphs::off;
         o.backend.cuda.graph_segments = g == CudaGraphs::segments;
       }},
      {"--cuda-int8-dot",
       "cuda: integer dp4a matvec for one-token quantized matmuls (every type but F32/F16/BF16; activations "
       "rounded to 8 bits); 0.86x end to end on an H100 (twice the launches; docs/decisions/0011-cuda-int8-dot.md)",
       Group::backend, true, {}, "", [](RunOptions& o, const std::string&) { o.backend.cuda.int8_dot = true; }},
      {"--cuda-pdl",
       "cuda: programmatic dependent launch on sm_90+ (each kernel scheduled while the previous one runs, "
       "waiting for it at its first instruction); off until measured (docs/decisions/0013-cuda-pdl.md)",
       Group::backend, true, {}, "", [](RunOptions& o, const std::string&) { o.backend.cuda.pdl = true; }},
      {"--cuda-no-fusion",
       "cuda: launch the decode step kernel per op instead of the fused kernels (same results; for measuring "
       "what fusion gains)",
       Group::backend, true, {}, "", [](RunOptions& o, const std::string&) { o.backend.cuda.fusion = false; }},
      {"--gdn-prefill",
       "Gated DeltaNet delta rule for prompt batches of 16+ tokens: auto (cpu: recurrent, bit-identical to "
       "llama.cpp; cuda: recurrent, measured faster than chunked on an H200), chunked, recurrent",
       Group::backend, false, {}, "auto",
       [](RunOptions& o, const std::string& v) {
         const GdnPrefillChoice g = parse_named(kGdnPrefill, v, "--gdn-prefill");
         if (g == GdnPrefillChoice::auto_) {  // each backend's own default
           o.backend.cpu.gdn_prefill = CpuOpsOptions{}.gdn_prefill;
           o.backend.cuda.gdn_prefill = CudaOpsOptions{}.gdn_prefill;
         } else {
           const cpu::GdnPrefill f =
               g == GdnPrefillChoice::chunked ? cpu::GdnPrefill::chunked : cpu::GdnPrefill::recurrent;
           o.backend.cpu.gdn_prefill = f;
           o.backend.cuda.gdn_prefill = f;
         }
       }},
      {"--no-repack",
       "cpu: keep Q4_0/IQ4_NL/MXFP4 matrices in the file's layout instead of repacking them at load (same "
       "results; slower kernels, no copy in RAM)",
       Group::backend, true, {}, "", [](RunOptions& o, const std::string&) { o.backend.cpu.repack = false; }},
  };
  return table;
}

// A flag's parser as CLI11 sees it: ferry's error becomes CLI11's, so a bad value is a usage
// error (exit 2, the message names the flag) like every other flag.
void checked(const Flag& f, RunOptions& o, const std::string& v) {
  try {
    f.apply(o, v);
  } catch (const Error& e) {
    throw CLI::ValidationError(f.names, e.what());
  }
}

}  // namespace

std::vector<std::string> split_list(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const std::string& s : in) {
    size_t start = 0;
    while (start <= s.size()) {
      const size_t comma = s.find(',', start);
      std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(std::move(item));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

void RunArgs::add(CLI::App& app, bool sweep) {
  for (const Flag& f : flags()) {
    if (sweep && (f.group == Group::engine_output || f.group == Group::observe_output)) continue;
    CLI::Option* opt = nullptr;
    if (sweep && f.sweep) {
      opt = app.add_option(f.names, sweep_[static_cast<size_t>(*f.sweep)],
                           std::string(f.help) + " (comma-separated sweep)");
    } else if (f.is_switch) {
      opt = app.add_flag_callback(f.names, [this, &f] { checked(f, options, ""); }, f.help);
    } else {
      opt = app.add_option_function<std::string>(
          f.names, [this, &f](const std::string& v) { checked(f, options, v); }, f.help);
    }
    if (*f.default_text) opt->default_str(f.default_text);
    // --device's default (auto) is resolved after the parse, and only when no device was given:
    // auto counts the CUDA devices, which a run on --device cpu must not do.
    if (!sweep && f.sweep == SweepFlag::device) opt->force_callback();
  }
}

RunArgs::RunArgs() = default;

void RunArgs::add_all(CLI::App& app) { add(app, false); }
void RunArgs::add_sweep(CLI::App& app) { add(app, true); }

std::vector<std::string> RunArgs::sweep(SweepFlag f) const { return split_list(sweep_[static_cast<size_t>(f)]); }

void RunArgs::apply_sweep(SweepFlag s, const std::string& value, RunOptions& o) {
  for (const Flag& f : flags())
    if (f.sweep == s) return f.apply(o, value);
  fail(ErrorKind::internal, "no flag sweeps {}", static_cast<int>(s));
}

}  // namespace ferry::cli
