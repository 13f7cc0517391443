#include "runtime/engine/moe_setup.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "kernels/cpu/rows16.hpp"
#include "offload/moe/cpu_executor.hpp"
#include "offload/moe/cuda_resident.hpp"
#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/backend/gdn_cuda.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"

namespace ferry {
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

// The routers (ffn_gate_inp, (n_expert, n_embd)) of every MoE layer, as views into the mapping.
std::vector<WeightView> router_views(const gguf::File& f, const ModelConfig& c) {
  std::vector<WeightView> routers;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const gguf::TensorInfo* t = f.find_tensor(layer_tensor(l, "ffn_gate_inp"));
    if (t && t->n_dims == 2 && t->ne[1] == static_cast<uint64_t>(c.n_expert))
      routers.push_back(
          {f.data(*t), t->type, static_cast<int64_t>(t->ne[1]), static_cast<int64_t>(t->ne[0])});
    else
      routers.push_back({});
  }
  return routers;
}

}  // namespace

MoeSetup::MoeSetup(MoeOptions o)
    : o_(std::move(o)), spec_(parse_routing_spec(o_.observe.routing, o_.observe.routing_seed)) {
  OffloadSettings& a = o_.offload;
  if (a.device == "auto") a.device = device_kind_name(default_device_kind());
  (void)parse_device_kind(a.device);
  if (a.device == "cpu" && (!a.vram.empty() || planning()))
    fail(ErrorKind::invalid_arg,
         "--vram, --print-plan, --plan-json and the profiles need --device sim (or cuda)");
  if (!a.vram.empty()) (void)parse_size(a.vram);  // bad sizes fail before loading
  if (a.prefetch < 0 || a.prefetch > 8)
    fail(ErrorKind::invalid_arg, "--prefetch {}: expected 0..8", a.prefetch);
  if (a.decode != "host" && a.decode != "table")
    fail(ErrorKind::invalid_arg, "--offload-decode '{}': expected host or table", a.decode);
  if (a.decode == "table" && a.device == "cuda" && !offloading())
    log::warn(
        "--offload-decode table applies to offloaded models: without --vram every expert is "
        "resident "
        "on the GPU, whose decode needs no host synchronisation anyway");
  if (a.decode == "table" && a.device == "cpu")
    fail(ErrorKind::invalid_arg,
         "--offload-decode table needs --device cuda or sim (the offload engine)");
  if (a.decode == "table" && a.device == "cuda" && a.host_load == "alias")
    fail(ErrorKind::invalid_arg,
         "--offload-decode table reads misses in place from pinned host memory: --host-load alias "
         "is not "
         "pinned (use uring, mmap or registered)");
  (void)parse_sim_link(a.sim_link);
  (void)parse_cold_mode(a.cold);
  (void)parse_eviction_policy(a.evict);
  if (!a.host_load.empty()) (void)parse_host_load(a.host_load);
}

MoeSetup::~MoeSetup() = default;

bool MoeSetup::planning() const {
  const OffloadSettings& a = o_.offload;
  return a.print_plan || !a.plan_json.empty() || !a.profile.empty() || !a.record_profile.empty();
}

bool MoeSetup::offloading() const {
  const OffloadSettings& a = o_.offload;
  return a.device == "sim" || (a.device == "cuda" && (!a.vram.empty() || planning()));
}

namespace {

// The CPU's experts: each tensor whose experts' matrices have whole groups of 16 rows is offered
// to the backend as one matrix of n_expert·n_out rows (CpuOps repacks it into the interleaved
// layout, group by group, so every expert's matrix stays at its own offset).
std::vector<MoeLayerWeights> cpu_layers(std::vector<MoeLayerWeights> layers, Ops& ops) {
  for (MoeLayerWeights& L : layers)
    for (ExpertTensor* t : {&L.gate, &L.up, &L.down}) {
      if (t->n_out % cpu::kRows16 != 0 || t->layout != WeightLayout::file ||
          t->expert_stride_bytes != static_cast<uint64_t>(t->n_out) *
                                        row_bytes(t->type, static_cast<uint64_t>(t->n_in)))
        continue;
      const WeightView v =
          ops.resident_matmul(WeightView{t->base, t->type, t->n_out * L.n_expert, t->n_in});
      t->base = static_cast<const uint8_t*>(v.data);
      t->layout = v.layout;
    }
  return layers;
}

}  // namespace

std::unique_ptr<MoeExecutor> MoeSetup::build(const std::vector<MoeLayerWeights>& layers,
                                             const gguf::File& f, Ops& ops) {
  const ModelConfig c = read_config(f);
  const bool cuda = std::string_view(ops.name()) == "cuda";
  // The run's one predictor first: the offload engine prefetches with it, --stats measures it.
  const std::vector<WeightView> routers = router_views(f, c);
  const int32_t depth = o_.offload.prefetch > 0 ? o_.offload.prefetch : 2;
  if (o_.offload.prefetch > 0 || o_.observe.stats) {
    PredictorOptions po;
    po.depth = depth;
    predictor_ =
        std::make_unique<RouterPredictor>(routers, c.n_layer, c.n_expert, c.n_expert_used, po);
  }
  std::unique_ptr<MoeExecutor> e;
  if (offloading()) e = build_offload(layers, f, c, ops);
  if (!e)
    e = cuda ? make_cuda_resident_executor(ops, layers)
             : std::unique_ptr<MoeExecutor>(std::make_unique<MoeCpuExecutor>(cpu_layers(layers, ops)));
  if (o_.observe.stats) {
    // The offload engine's counters are the one sink when it runs; otherwise these hold the
    // tokens (every expert resident: nothing else to count).
    if (!offload_) counters_ = std::make_unique<StatsCounters>(c.n_layer);
    // The offload engine scores the predictor it prefetches with; otherwise it is measured here.
    RouterPredictor* measure = offload_ && o_.offload.prefetch > 0 ? nullptr : predictor_.get();
    stats_ =
        std::make_unique<RoutingStatsObserver>(c.n_layer, c.n_expert, measure, counters_.get());
    observers_.add(stats_.get());
  }
  if (o_.tracer && o_.tracer->enabled()) {
    trace_ = std::make_unique<TraceObserver>(*o_.tracer);
    observers_.add(trace_.get());
  }
  if (!o_.offload.record_profile.empty()) {
    profile_ = std::make_unique<ProfileRecorder>(c.n_layer, c.n_expert);
    observers_.add(profile_.get());
  }
  if (!o_.observe.record_routing.empty()) {
    recorder_ = std::make_unique<RoutingRecorder>(
        o_.observe.record_routing, RoutingTraceHeader{c.n_layer, c.n_expert, c.n_expert_used});
    observers_.add(recorder_.get());
  }
  for (MoeObserver* x : o_.observers) observers_.add(x);
  if (spec_.mode != RoutingMode::model) {
    RoutingOptions ro;
    ro.spec = spec_;
    ro.routers = routers;
    ro.n_layer = c.n_layer;
    ro.n_expert = c.n_expert;
    ro.top_k = c.n_expert_used;
    if (cuda) ro.device_ops = &ops;  // device routing: the override's ids are uploaded
    e = std::make_unique<RoutingExecutor>(std::move(e), std::move(ro));
  }
  e->set_observers(&observers_);
  executor_ = e.get();
  return e;
}

std::unique_ptr<MoeExecutor> MoeSetup::build_offload(
    const std::vector<MoeLayerWeights>& model_layers, const gguf::File& f, const ModelConfig& c,
    Ops& ops) {
  const OffloadSettings& a = o_.offload;
  std::vector<MoeLayerWeights> layers = model_layers;
  std::vector<std::array<uint64_t, 3>> offsets;
  for (int32_t l = 0; l < c.n_layer; ++l)
    offsets.push_back({f.tensor(layer_tensor(l, "ffn_gate_exps")).file_offset,
                       f.tensor(layer_tensor(l, "ffn_up_exps")).file_offset,
                       f.tensor(layer_tensor(l, "ffn_down_exps")).file_offset});
  const int64_t n_ctx = o_.n_ctx > 0 ? o_.n_ctx : std::min<int64_t>(c.n_ctx_train, 4096);
  const DeviceKind kind = parse_device_kind(a.device);
  const bool cuda = kind == DeviceKind::cuda;
  Device* cuda_dev = cuda ? &cuda_ops_device(ops) : nullptr;
  // cuda: the dense weights are resident by now; the budget is the device's (--vram, or what the
  // card had free).
  const uint64_t budget = cuda             ? cuda_dev->memory().budget_bytes
                          : a.vram.empty() ? 0
                                           : parse_size(a.vram);
  PlacementInput in = placement_input(f, c, n_ctx, o_.type_k, o_.type_v, o_.n_batch, budget);
  const int64_t max_batch = std::min<int64_t>(o_.n_batch, n_ctx);
  in.step_bytes =
      device_step_bytes(max_batch, expert_shape(layers[0]), c.n_expert_used, c.n_expert);
  if (a.decode == "table")
    in.step_bytes += decode_table_bytes(c.n_layer, c.n_expert, c.n_expert_used, c.n_embd);
  if (cuda) {
    // What is really allocated replaces the estimate: the dense weights, and the CudaOps
    // workspaces (counted as workspace, with a margin for the attention scratch, and the chunked
    // DeltaNet prefill's scratch for the largest step when that form is chosen).
    const uint64_t backend_ws = cuda_ops_workspace_bytes(ops);
    in.dense_bytes = cuda_dev->memory().used_bytes - backend_ws;
    in.workspace_bytes += backend_ws + (32ull << 20);
    if (cuda_ops_gdn_prefill(ops) == cpu::GdnPrefill::chunked)
      in.workspace_bytes +=
          cuda_gdn_scratch_bytes(c.ssm_group_count, c.ssm_time_step_rank, c.ssm_state_size, max_batch);
  }
  std::unique_ptr<ExpertProfile> profile;
  if (!a.profile.empty()) profile = std::make_unique<ExpertProfile>(ExpertProfile::read(a.profile));
  OffloadOptions o;
  o.tracer = o_.tracer;
  o.plan = make_plan(in, profile.get(), a.profile);
  if (a.print_plan) std::fputs(plan_text(o.plan).c_str(), stderr);
  if (!a.plan_json.empty()) {
    std::ofstream out(a.plan_json, std::ios::trunc);
    if (!(out << plan_json(o.plan))) fail(ErrorKind::io, "cannot write {}", a.plan_json);
  }
  o.gguf_path = f.path();
  o.file_offsets = std::move(offsets);
  o.host_load = a.host_load.empty() ? (kind == DeviceKind::sim ? HostLoad::alias : HostLoad::uring)
                                    : parse_host_load(a.host_load);
  o.policy = parse_eviction_policy(a.evict);
  o.cold = parse_cold_mode(a.cold);
  if (!a.hw_profile.empty()) o.rates = rates_from_profile(a.hw_profile);
  if (a.prefetch > 0) o.predictor = predictor_.get();
  const bool tty = isatty(STDERR_FILENO);
  o.progress = [tty, last = -1](double frac) mutable {
    const int pct = static_cast<int>(frac * 100.0);
    if (pct == last || (!tty && pct != 100)) return;
    last = pct;
    std::fprintf(stderr, "%sferry: host expert store %3d%%%s", tty ? "\r" : "", pct,
                 pct == 100 ? "\n" : "");
  };
  o.max_batch = max_batch;
  o.decode_table = a.decode == "table";
  std::unique_ptr<OffloadExecutor> e;
  if (cuda) {
    const int64_t total = int64_t{c.n_expert} * c.n_layer;
    if (o.plan.n_slots >= total) {
      std::fprintf(
          stderr,
          "ferry: every routed expert fits the budget: resident on the GPU, no offloading%s\n",
          o.decode_table ? " (--offload-decode table does not apply)" : "");
      return nullptr;  // the resident executor (build)
    }
    o.reserve_fixed = false;  // the dense part, KV cache and workspace are real allocations here
    e = std::make_unique<OffloadExecutor>(
        *cuda_dev, cuda_stream_view(*cuda_dev, cuda_ops_stream(ops)),
        make_cuda_expert_kernels(*cuda_dev), std::move(layers), std::move(o));
  } else {
    DeviceOptions d;
    d.budget_bytes = budget;
    d.sim_link = parse_sim_link(a.sim_link);
    e = std::make_unique<OffloadExecutor>(make_device(kind, d), std::move(layers), std::move(o));
  }
  offload_ = e.get();
  const HostStoreStats& hs = e->stats().store;
  if (hs.load_gbps > 0)
    std::fprintf(stderr,
                 "ferry: host store: %.1f MB of experts by %s (%s%s) in %.0f ms, %.2f GB/s\n",
                 static_cast<double>(hs.bytes) / 1e6, host_load_name(hs.mode),
                 hs.pinned ? "pinned" : "pageable", hs.direct_io ? ", O_DIRECT" : "", hs.load_ms,
                 hs.load_gbps);
  return e;
}

void MoeSetup::finish() {
  if (finished_) return;
  finished_ = true;
  // Settles the last copies and reports routing still in a device log (table decode, the resident
  // CUDA executor's observers): the profile, the trace and --stats see every token.
  if (executor_) executor_->drain();
  if (profile_) profile_->profile().write(o_.offload.record_profile);
  if (recorder_) recorder_->finish();
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

}  // namespace ferry
