#include "runtime/cli/offload_args.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/cuda_ops_moe.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/backend/gdn_cuda.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/weights.hpp"

namespace ferry::cli {
namespace {

SimLinkModel parse_sim_link(const std::string& s) {
  SimLinkModel m;
  try {
    const size_t colon = s.find(':');
    m.h2d_gbps = std::stod(s.substr(0, colon));
    if (colon != std::string::npos) m.latency_us = std::stod(s.substr(colon + 1));
  } catch (const std::exception&) {
    fail(ErrorKind::invalid_arg, "--sim-link '{}': expected GBPS or GBPS:LATENCY_US (e.g. 13:10)",
         s);
  }
  if (m.h2d_gbps < 0 || m.latency_us < 0)
    fail(ErrorKind::invalid_arg, "--sim-link '{}': negative figures", s);
  m.d2h_gbps = m.h2d_gbps;
  return m;
}

// "blk.N.…" with N ≥ n_layer: trailing MTP/nextn blocks the forward does not run.
bool beyond_layers(const std::string& name, int32_t n_layer) {
  if (name.rfind("blk.", 0) != 0) return false;
  return std::atoi(name.c_str() + 4) >= n_layer;
}

}  // namespace

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
  app.add_option("--prefetch", a.prefetch, "layers ahead to predict and prefetch (0: off)")
      ->check(CLI::Range(0, 8));
  app.add_option("--sim-link", a.sim_link,
                 "sim device link model GBPS[:LATENCY_US] (0: memcpy speed)");
  app.add_option("--hw-profile", a.hw_profile,
                 "cost-model rates from a hardware profile JSON (default: calibrate)");
  app.add_option("--sim-flow", a.sim_flow,
                 "sim device: exact (synchronous, bit-identical to the CPU) or device (the CUDA flow: "
                 "expert kernels on a compute stream, CPU experts beside them)")
      ->check(CLI::IsMember({"exact", "device"}));
  app.add_option("--offload-decode", a.decode,
                 "cuda decode steps: host (routing copied to the host per MoE step: CPU experts, cost model, "
                 "prediction) or table (device tables, no host sync, recorded as CUDA graphs; misses read in "
                 "place from pinned host memory and admitted behind)")
      ->check(CLI::IsMember({"host", "table"}));
  app.add_flag("--offload-stats", a.stats, "print the offload executor's counters at the end");
}

PlacementInput placement_input(const gguf::File& f, const ModelConfig& c, int64_t n_ctx,
                               GgmlType type_k, GgmlType type_v, int32_t n_batch,
                               uint64_t budget_bytes) {
  PlacementInput in;
  in.model = f.path();
  in.n_layer = c.n_layer;
  in.n_expert = c.n_expert;
  in.n_expert_used = c.n_expert_used;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (beyond_layers(t.name, c.n_layer)) continue;
    if (t.name.find("_exps.") == std::string::npos) in.dense_bytes += t.n_bytes;
  }
  for (int32_t l = 0; l < c.n_layer; ++l) {
    uint64_t b = 0;
    for (const char* m : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
      b += f.tensor(layer_tensor(l, m)).nb[2];
    in.layer_expert_bytes.push_back(b);
  }
  // KV cache, recurrent state and workspace exactly as the session will allocate them.
  StateOptions so;
  so.n_ctx = n_ctx;
  so.type_k = type_k;
  so.type_v = type_v;
  so.n_batch = n_batch;
  const StateFootprint fp = state_footprint(c, so);
  in.kv_bytes = fp.kv_bytes;
  in.state_bytes = fp.recurrent_bytes;
  in.workspace_bytes = fp.workspace_bytes;
  in.n_ctx = n_ctx;
  in.kv_types = fmt::format("{}/{}", type_name(type_k), type_name(type_v));
  in.budget_bytes = budget_bytes;
  return in;
}

Offload::Offload(OffloadArgs a, int64_t n_ctx, GgmlType type_k, GgmlType type_v, int32_t n_batch)
    : a_(std::move(a)), n_ctx_(n_ctx), type_k_(type_k), type_v_(type_v), n_batch_(n_batch) {
  if (a_.device == "auto") a_.device = device_kind_name(default_device_kind());
  if (a_.device == "cpu" && (!a_.vram.empty() || planning()))
    fail(ErrorKind::invalid_arg,
         "--vram, --print-plan, --plan-json and the profiles need --device sim (or cuda)");
  if (!a_.vram.empty()) (void)parse_size(a_.vram);  // bad sizes fail before loading
  if (a_.decode == "table" && a_.device == "cuda" && !active())
    log::warn("--offload-decode table applies to offloaded models: without --vram every expert is resident "
              "on the GPU, whose decode needs no host synchronisation anyway");
  if (a_.decode == "table" && a_.device != "cuda" && !(a_.device == "sim" && a_.sim_flow == "device"))
    fail(ErrorKind::invalid_arg,
         "--offload-decode table needs --device cuda (or --device sim --sim-flow device, which runs the CUDA flow)");
  if (a_.decode == "table" && a_.device == "cuda" && a_.host_load == "alias")
    fail(ErrorKind::invalid_arg,
         "--offload-decode table reads misses in place from pinned host memory: --host-load alias is not "
         "pinned (use uring, mmap or registered)");
  (void)parse_sim_link(a_.sim_link);
}

Offload::~Offload() = default;

bool Offload::planning() const {
  return a_.print_plan || !a_.plan_json.empty() || !a_.profile.empty() || !a_.record_profile.empty();
}

bool Offload::active() const {
  return a_.device == "sim" || (a_.device == "cuda" && (!a_.vram.empty() || planning()));
}

MoeExecutorWrap Offload::wrap(MoeExecutorWrap then, Tracer* tracer) {
  if (!active()) return then;
  return [this, then, tracer](std::unique_ptr<MoeExecutor> inner,
                      const gguf::File& f, Ops& ops) -> std::unique_ptr<MoeExecutor> {
    inner.reset();  // the engine's CPU executor is replaced
    ops_ = &ops;
    const ModelConfig c = read_config(f);
    const WeightLoader w(f);
    std::vector<MoeLayerWeights> layers;
    std::vector<std::array<uint64_t, 3>> offsets;
    std::vector<WeightView> routers;
    for (int32_t l = 0; l < c.n_layer; ++l) {
      MoeLayerWeights L;
      L.gate = w.experts(layer_tensor(l, "ffn_gate_exps"), c.n_embd, c.n_ff_exp, c.n_expert);
      L.up = w.experts(layer_tensor(l, "ffn_up_exps"), c.n_embd, c.n_ff_exp, c.n_expert);
      L.down = w.experts(layer_tensor(l, "ffn_down_exps"), c.n_ff_exp, c.n_embd, c.n_expert);
      L.n_expert = c.n_expert;
      layers.push_back(L);
      offsets.push_back({f.tensor(layer_tensor(l, "ffn_gate_exps")).file_offset,
                         f.tensor(layer_tensor(l, "ffn_up_exps")).file_offset,
                         f.tensor(layer_tensor(l, "ffn_down_exps")).file_offset});
      routers.push_back(w.matrix(layer_tensor(l, "ffn_gate_inp"), c.n_embd, c.n_expert));
    }
    const int64_t n_ctx = n_ctx_ > 0 ? n_ctx_ : default_context(c);
    const DeviceKind kind = parse_device_kind(a_.device);
    const bool cuda = kind == DeviceKind::cuda;
    Device* cuda_dev = cuda ? &cuda_ops_device(ops) : nullptr;
    // cuda: the dense weights are resident by now; the budget is the device's (--vram, or what the
    // card had free).
    const uint64_t budget = cuda ? cuda_dev->memory().budget_bytes : a_.vram.empty() ? 0 : parse_size(a_.vram);
    PlacementInput in = placement_input(f, c, n_ctx, type_k_, type_v_, n_batch_, budget);
    const bool device_flow = cuda || a_.sim_flow == "device";
    const int64_t max_batch = std::min<int64_t>(n_batch_, n_ctx);
    if (device_flow)
      in.step_bytes = device_flow_step_bytes(max_batch, expert_shape(layers[0]), c.n_expert_used, c.n_expert);
    if (a_.decode == "table" && device_flow)
      in.step_bytes += decode_table_bytes(c.n_layer, c.n_expert, c.n_expert_used);
    if (cuda) {
      // What is really allocated replaces the estimate: the dense weights, and the CudaOps
      // workspaces (counted as workspace, with a margin for the attention scratch, and the chunked
      // DeltaNet prefill's scratch for the largest step).
      const uint64_t backend_ws = cuda_ops_workspace_bytes(ops);
      in.dense_bytes = cuda_dev->memory().used_bytes - backend_ws;
      in.workspace_bytes += backend_ws + (32ull << 20) +
                            cuda_gdn_scratch_bytes(c.ssm_group_count, c.ssm_time_step_rank, c.ssm_state_size, max_batch);
    }
    std::unique_ptr<ExpertProfile> profile;
    if (!a_.profile.empty())
      profile = std::make_unique<ExpertProfile>(ExpertProfile::read(a_.profile));
    OffloadOptions o;
    o.tracer = tracer;
    o.plan = make_plan(in, profile.get(), a_.profile);
    if (a_.print_plan) std::fputs(plan_text(o.plan).c_str(), stderr);
    if (!a_.plan_json.empty()) {
      std::ofstream out(a_.plan_json, std::ios::trunc);
      if (!(out << plan_json(o.plan))) fail(ErrorKind::io, "cannot write {}", a_.plan_json);
    }
    o.gguf_path = f.path();
    o.file_offsets = std::move(offsets);
    o.host_load = a_.host_load.empty()
                      ? (kind == DeviceKind::sim ? HostLoad::alias : HostLoad::uring)
                      : parse_host_load(a_.host_load);
    o.policy = parse_eviction_policy(a_.evict);
    o.cold = parse_cold_mode(a_.cold);
    if (!a_.hw_profile.empty()) o.rates = rates_from_profile(a_.hw_profile);
    if (a_.prefetch > 0) {
      PredictorOptions po;
      po.depth = a_.prefetch;
      predictor_ =
          std::make_unique<RouterPredictor>(routers, c.n_layer, c.n_expert, c.n_expert_used, po);
      o.predictor = predictor_.get();
    }
    if (!a_.record_profile.empty()) {
      record_ = std::make_unique<ExpertProfile>(c.n_layer, c.n_expert);
      o.record = record_.get();
    }
    const bool tty = isatty(STDERR_FILENO);
    o.progress = [tty, last = -1](double frac) mutable {
      const int pct = static_cast<int>(frac * 100.0);
      if (pct == last || (!tty && pct != 100)) return;
      last = pct;
      std::fprintf(stderr, "%sferry: host expert store %3d%%%s", tty ? "\r" : "", pct,
                   pct == 100 ? "\n" : "");
    };
    o.device_flow = device_flow;
    o.max_batch = max_batch;
    o.decode_table = a_.decode == "table";
    std::unique_ptr<OffloadExecutor> e;
    if (cuda) {
      const int64_t total = int64_t{c.n_expert} * c.n_layer;
      if (o.plan.n_slots >= total) {
        std::fprintf(stderr, "ferry: every routed expert fits the budget: resident on the GPU, no offloading%s\n",
                     o.decode_table ? " (--offload-decode table does not apply)" : "");
        std::unique_ptr<MoeExecutor> resident = make_cuda_moe_executor(ops, layers);
        return then ? then(std::move(resident), f, ops) : std::move(resident);
      }
      o.reserve_fixed = false;  // the dense part, KV cache and workspace are real allocations here
      e = std::make_unique<OffloadExecutor>(*cuda_dev, cuda_stream_view(*cuda_dev, cuda_ops_stream(ops)),
                                            make_cuda_expert_kernels(*cuda_dev), std::move(layers), std::move(o));
    } else {
      DeviceOptions d;
      d.budget_bytes = budget;
      d.sim_link = parse_sim_link(a_.sim_link);
      e = std::make_unique<OffloadExecutor>(make_device(kind, d), std::move(layers), std::move(o));
    }
    executor_ = e.get();
    const HostStoreStats& hs = e->stats().store;
    if (hs.load_gbps > 0)
      std::fprintf(stderr,
                   "ferry: host store: %.1f MB of experts by %s (%s%s) in %.0f ms, %.2f GB/s\n",
                   static_cast<double>(hs.bytes) / 1e6, host_load_name(hs.mode),
                   hs.pinned ? "pinned" : "pageable", hs.direct_io ? ", O_DIRECT" : "", hs.load_ms,
                   hs.load_gbps);
    std::unique_ptr<MoeExecutor> out = std::move(e);
    return then ? then(std::move(out), f, ops) : std::move(out);
  };
}

void Offload::attach(StatsCounters* counters) {
  if (executor_) executor_->set_counters(counters);
}

void Offload::finish() {
  // Settles the last copies and, for table decode, counts the last step's routing (its log is
  // read one step late): the profile, --offload-stats and --stats see every token.
  if (executor_) executor_->drain();
  if (record_) record_->write(a_.record_profile);
  if (a_.stats && executor_) {
    std::fputs(offload_stats_text(executor_->stats()).c_str(), stderr);
    if (ops_ && std::string_view(ops_->name()) == "cuda") {
      const CudaGraphStats g = cuda_ops_graph_stats(*ops_);
      std::fprintf(stderr, "offload: cuda graphs %s: %llu launched, %llu instantiated%s\n", g.enabled ? "on" : "off",
                   static_cast<unsigned long long>(g.launches), static_cast<unsigned long long>(g.instantiations),
                   g.launches ? ""
                              : " (offloaded decode is recorded with --offload-decode table, or around its MoE steps "
                                "with FERRY_CUDA_GRAPHS=segments)");
    }
  }
}

}  // namespace ferry::cli
