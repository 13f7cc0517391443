// make_offload_executor (offload/offload.hpp): the placement plan, the host store and the engine
// from the engine's request.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "offload/offload.hpp"
#include "offload/offload_executor.hpp"
#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/moe/placement_profile.hpp"

namespace ferry {

uint64_t cuda_plan_workspace_bytes(const Ops& ops, uint64_t extra_bytes) {
  return cuda_ops_workspace_bytes(ops) + (32ull << 20) + extra_bytes;
}

uint64_t offload_step_bytes(int64_t max_batch, const ExpertShape& shape, int32_t top_k, int32_t n_expert) {
  return device_step_bytes(max_batch, shape, top_k, n_expert);
}

uint64_t offload_min_budget_bytes(const PlacementInput& in) {
  PlacementInput all = in;
  all.budget_bytes = 0;  // plan every expert resident: only the fixed part and classes are read
  return make_plan(all).min_budget_bytes();
}

OffloadBuild make_offload_executor(OffloadRequest r) {
  const OffloadSettings& a = r.settings;
  if (r.layers.empty()) fail(ErrorKind::internal, "offload: a model without expert layers");
  const bool cuda = r.device == DeviceKind::cuda;
  if (cuda && (!r.ops || r.ops->kind() != BackendKind::cuda))
    fail(ErrorKind::internal, "offload on cuda needs the forward on cuda");
  Device* cuda_dev = cuda ? &cuda_ops_device(*r.ops) : nullptr;
  PlacementInput in = std::move(r.placement);
  // cuda: the dense weights are resident by now; the budget is the device's (--vram, or what the
  // card had free).
  in.budget_bytes = cuda ? cuda_dev->memory().budget_bytes : r.sim_budget_bytes;
  const int32_t top_k = in.n_expert_used;
  in.step_bytes = device_step_bytes(r.max_batch, expert_shape(r.layers[0]), top_k, in.n_expert);
  if (a.decode == DecodeMode::table)
    in.step_bytes += decode_table_bytes(in.n_layer, in.n_expert, top_k, r.layers[0].gate.n_in);
  if (cuda) {
    // What is really allocated replaces the estimate: the dense weights, and the CudaOps
    // workspaces (counted as workspace, with a margin for the attention scratch, and the chunked
    // DeltaNet prefill's scratch for the largest step when that form is chosen).
    in.dense_bytes = cuda_dev->memory().used_bytes - cuda_ops_workspace_bytes(*r.ops);
    in.workspace_bytes += cuda_plan_workspace_bytes(*r.ops, r.cuda_extra_workspace_bytes);
  }
  std::unique_ptr<ExpertProfile> profile;
  if (!a.profile.empty()) profile = std::make_unique<ExpertProfile>(ExpertProfile::read(a.profile));
  OffloadOptions o;
  o.tracer = r.tracer;
  o.counters = r.counters;
  o.plan = make_plan(in, profile.get(), a.profile);
  if (a.print_plan) std::fputs(plan_text(o.plan).c_str(), stderr);
  if (!a.plan_json.empty()) {
    std::ofstream out(a.plan_json, std::ios::trunc);
    if (!(out << plan_json(o.plan))) fail(ErrorKind::io, "cannot write {}", a.plan_json);
  }
  o.gguf_path = r.gguf_path;
  o.file_offsets = std::move(r.file_offsets);
  o.host_load = a.host_load.value_or(cuda ? HostLoad::uring : HostLoad::alias);
  o.policy = a.evict;
  o.cold = a.cold;
  if (!a.hw_profile.empty()) o.rates = rates_from_profile(a.hw_profile);
  o.predictor = r.predictor;
  const bool tty = isatty(STDERR_FILENO);
  o.progress = [tty, last = -1](double frac) mutable {
    const int pct = static_cast<int>(frac * 100.0);
    if (pct == last || (!tty && pct != 100)) return;
    last = pct;
    std::fprintf(stderr, "%sferry: host expert store %3d%%%s", tty ? "\r" : "", pct,
                 pct == 100 ? "\n" : "");
  };
  o.max_batch = r.max_batch;
  o.decode_table = a.decode == DecodeMode::table;
  std::unique_ptr<OffloadExecutor> e;
  if (cuda) {
    const int64_t total = int64_t{in.n_expert} * in.n_layer;
    if (o.plan.n_slots >= total) {
      std::fprintf(
          stderr,
          "ferry: every routed expert fits the budget: resident on the GPU, no offloading%s\n",
          o.decode_table ? " (--offload-decode table does not apply)" : "");
      return {};  // the engine runs the resident executor
    }
    o.reserve_fixed = false;  // the dense part, KV cache and workspace are real allocations here
    e = std::make_unique<OffloadExecutor>(
        *cuda_dev, cuda_stream_view(*cuda_dev, cuda_ops_stream(*r.ops)),
        make_cuda_expert_kernels(*cuda_dev, cuda_ops_fusion(*r.ops)), std::move(r.layers), std::move(o));
  } else {
    DeviceOptions d;
    d.budget_bytes = r.sim_budget_bytes;
    d.sim_link = a.sim_link;
    e = std::make_unique<OffloadExecutor>(make_device(DeviceKind::sim, d), std::move(r.layers),
                                          std::move(o));
  }
  const HostStoreStats& hs = e->stats().store;
  if (hs.load_gbps > 0)
    std::fprintf(stderr,
                 "ferry: host store: %.1f MB of experts by %s (%s%s) in %.0f ms, %.2f GB/s\n",
                 static_cast<double>(hs.bytes) / 1e6, host_load_name(hs.mode),
                 hs.pinned ? "pinned" : "pageable", hs.direct_io ? ", O_DIRECT" : "", hs.load_ms,
                 hs.load_gbps);
  OffloadBuild b;
  b.engine = e.get();
  b.executor = std::move(e);
  return b;
}

}  // namespace ferry
