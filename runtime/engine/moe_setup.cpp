#include "runtime/engine/moe_setup.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "kernels/cpu/rows16.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/gdn_cuda.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"
#include "runtime/moe/cpu_executor.hpp"
#include "runtime/moe/cuda_resident.hpp"

namespace ferry {
namespace {

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

MoeSetup::MoeSetup(RunOptions o, RunPlan plan) : o_(std::move(o)), plan_(plan) {}

MoeSetup::~MoeSetup() = default;

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
  const bool cuda = ops.kind() == BackendKind::cuda;
  // The run's one predictor first: the offload engine prefetches with it, --stats measures it.
  const std::vector<WeightView> routers = router_views(f, c);
  const int32_t depth = o_.offload.prefetch > 0 ? o_.offload.prefetch : 2;
  if (o_.offload.prefetch > 0 || o_.observe.stats) {
    PredictorOptions po;
    po.depth = depth;
    predictor_ =
        std::make_unique<RouterPredictor>(routers, c.n_layer, c.n_expert, c.n_expert_used, po);
  }
  // The run's one counters sink: the offload engine counts into it, --stats reads it.
  if (plan_.offload || o_.observe.stats) counters_ = std::make_unique<StatsCounters>(c.n_layer);
  std::unique_ptr<MoeExecutor> e;
  if (plan_.offload) e = build_offload(layers, f, c, ops);
  if (!e)
    e = cuda ? make_cuda_resident_executor(ops, layers)
             : std::unique_ptr<MoeExecutor>(std::make_unique<MoeCpuExecutor>(cpu_layers(layers, ops)));
  if (o_.observe.stats) {
    // The offload engine scores the predictor it prefetches with; otherwise it is measured here.
    RouterPredictor* measure = offload_ && o_.offload.prefetch > 0 ? nullptr : predictor_.get();
    // The offload engine counts the tokens it runs; otherwise the observer does.
    stats_ = std::make_unique<RoutingStatsObserver>(c.n_layer, c.n_expert, measure,
                                                    offload_ ? nullptr : counters_.get());
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
  if (o_.observe.routing.mode != RoutingMode::model) {
    RoutingOptions ro;
    ro.spec = o_.observe.routing;
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
    const std::vector<MoeLayerWeights>& layers, const gguf::File& f, const ModelConfig& c,
    Ops& ops) {
  OffloadRequest r;
  r.settings = o_.offload;
  r.device = plan_.offload_device;
  r.sim_budget_bytes = plan_.sim_budget_bytes;
  r.layers = layers;
  r.gguf_path = f.path();
  for (int32_t l = 0; l < c.n_layer; ++l)
    r.file_offsets.push_back({f.tensor(layer_tensor(l, "ffn_gate_exps")).file_offset,
                              f.tensor(layer_tensor(l, "ffn_up_exps")).file_offset,
                              f.tensor(layer_tensor(l, "ffn_down_exps")).file_offset});
  const int64_t n_ctx = o_.n_ctx > 0 ? o_.n_ctx : default_context(c);
  r.max_batch = std::min<int64_t>(o_.n_batch, n_ctx);
  r.placement = placement_input(f, c, n_ctx, o_.type_k, o_.type_v, o_.n_batch, plan_.sim_budget_bytes);
  r.cuda_extra_workspace_bytes = cuda_extra_workspace_bytes(ops, c, r.max_batch);
  r.ops = &ops;
  if (o_.offload.prefetch > 0) r.predictor = predictor_.get();
  r.tracer = o_.tracer;
  r.counters = counters_.get();
  OffloadBuild b = make_offload_executor(std::move(r));
  offload_ = b.engine;
  return std::move(b.executor);
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

uint64_t cuda_extra_workspace_bytes(const Ops& ops, const ModelConfig& c, int64_t max_batch) {
  // The chunked DeltaNet prefill's scratch for the largest step, when the backend uses that form.
  if (ops.kind() == BackendKind::cuda && cuda_ops_gdn_prefill(ops) == cpu::GdnPrefill::chunked)
    return cuda_gdn_scratch_bytes(c.ssm_group_count, c.ssm_time_step_rank, c.ssm_state_size, max_batch);
  return 0;
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
