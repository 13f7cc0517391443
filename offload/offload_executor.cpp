#include "offload/offload_executor.hpp"

#include <algorithm>
#include <chrono>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

OffloadExecutor::OffloadExecutor(std::unique_ptr<Device> device,
                                 std::vector<MoeLayerWeights> layers, OffloadOptions options)
    : o_(std::move(options)), owned_device_(std::move(device)) {
  device_ = owned_device_.get();
  if (!device_) fail(ErrorKind::internal, "offload executor without a device");
  if (device_->kind() != DeviceKind::sim)
    fail(ErrorKind::invalid_arg,
         "the offload executor owns only sim devices; a {} device comes with its compute stream",
         device_kind_name(device_->kind()));
  compute_ = device_->create_stream();
  kernels_ = make_sim_expert_kernels();
  init(std::move(layers));
}

OffloadExecutor::OffloadExecutor(Device& device, std::unique_ptr<Stream> compute,
                                 std::unique_ptr<DeviceExpertKernels> kernels,
                                 std::vector<MoeLayerWeights> layers, OffloadOptions options)
    : o_(std::move(options)),
      device_(&device),
      compute_(std::move(compute)),
      kernels_(std::move(kernels)) {
  if (!compute_ || !kernels_)
    fail(ErrorKind::internal, "offload executor without a compute stream or kernels");
  init(std::move(layers));
}

void OffloadExecutor::init(std::vector<MoeLayerWeights> layers) {
  compute_done_ = device_->create_event();
  if (o_.counters) {
    counters_ = o_.counters;
  } else {
    owned_counters_ = std::make_unique<StatsCounters>(static_cast<int32_t>(layers.size()));
    counters_ = owned_counters_.get();
  }
  res_ = std::make_unique<Residency>(*device_, std::move(layers), o_, *compute_done_);
  res_->set_counters(counters_);
  step_ = std::make_unique<DeviceStep>(*device_, *compute_, *kernels_, *res_, o_, *compute_done_);
  if (o_.decode_table)
    tables_ = std::make_unique<TableDecoder>(*device_, *compute_, *kernels_, res_->shapes(),
                                             res_->mapped(), o_.plan.in.n_expert_used);
  calibrate();
  counters_->reset();
  counters_->add(Count::init_bytes, res_->init_bytes());
}

void OffloadExecutor::calibrate() {
  if (o_.rates) {
    cost_ = CostModel(*o_.rates);
    return;
  }
  // Expert 0 of layer 0 copied into staging slot 0, then the expert kernels reading it there.
  const ExpertPtrs staged = res_->staging_ptrs(0, 0);
  HardwareRates r = calibrate_rates(*device_, res_->shape(0), res_->host_ptrs(0, 0),
                                    const_cast<uint8_t*>(staged.gate));
  if (const double g = step_->time_kernels(res_->shape(0), {staged, staged, staged, staged}); g > 0)
    r.device_gbps = g;
  // The same kernels reading experts in place, each once (a repeated one could be served from the
  // device's L2 instead of the link); 0 when it cannot be measured: never chosen.
  if (!res_->mapped().empty() && device_->kind() == DeviceKind::cuda) {
    std::vector<ExpertPtrs> entries;
    for (int32_t e = 0; e < std::min(4, o_.plan.in.n_expert); ++e)
      entries.push_back(expert_ptrs(res_->mapped()[0], e));
    if (entries.size() >= 2) r.mapped_gbps = step_->time_kernels(res_->shape(0), entries);
  }
  cost_ = CostModel(r);
}

OffloadExecutor::~OffloadExecutor() {
  // Copies may still read the host store or write slots: let every stream drain first.
  try {
    device_->synchronize();
  } catch (...) {
  }
}

Resolved OffloadExecutor::resolve(int32_t layer, int32_t expert, int64_t n_tokens, bool decode) {
  Resolved r;
  r.expert = expert;
  const uint64_t bytes = res_->shape(layer).expert_bytes();
  const Residency::Lookup at = res_->look_up(layer, expert, tick_);
  ExpertState state{at.where, bytes, 0.0};
  if (state.where == Residence::in_flight)
    state.copy_remaining_us = std::max(0.0, cost_.copy_us(bytes) - at.copy_age_us);
  const Decision d =
      decide(state, cost_, DecideContext{o_.cold, n_tokens, decode, !res_->mapped().empty()});
  if (state.where == Residence::ready) {
    counters_->hit(layer);
  } else {
    counters_->miss(layer);
    if (state.where == Residence::in_flight) counters_->add(Count::inflight);
  }
  // Decode misses computed elsewhere are admitted behind, so the cache follows the routing's
  // locality (a prefill would push out the decode working set for experts used once).
  const bool admit_behind = decode && o_.admit && state.where == Residence::absent;
  switch (d) {
    case Decision::mapped:
      counters_->add(Count::mapped);
      counters_->add(Count::mapped_bytes, bytes);
      r.mapped = true;
      r.w = expert_ptrs(res_->mapped()[static_cast<size_t>(layer)], expert);
      if (admit_behind) res_->admit(layer, expert, tick_);
      return r;
    case Decision::stream:
      counters_->add(Count::streamed);
      counters_->h2d(layer, bytes);  // its staging copy
      r.stream = true;
      r.w = res_->host_ptrs(layer, expert);
      return r;
    case Decision::wait: {
      const auto t0 = Clock::now();
      {
        Tracer::Span span(o_.tracer, "wait prefetch", "wait",
                          {{"layer", layer}, {"expert", expert}});
        res_->wait(at.slot);
      }
      counters_->wait(WaitCause::copy, static_cast<uint64_t>(ms_since(t0) * 1e6));
      counters_->add(Count::waited);
      [[fallthrough]];
    }
    case Decision::slot:
      r.pinned_slot = at.slot;
      r.w = res_->pin(at.slot, layer);
      return r;
    case Decision::copy_now: {
      double waited_ms = 0;
      if (const int32_t slot = res_->fill(layer, expert, tick_, waited_ms); slot >= 0) {
        counters_->add(Count::copy_now);
        counters_->h2d(layer, bytes);
        counters_->wait(WaitCause::copy, static_cast<uint64_t>(waited_ms * 1e6));
        r.pinned_slot = slot;
        r.w = res_->slot_ptrs(slot, layer);
        return r;
      }
      break;  // no evictable slot: on the CPU (not admitted: nothing could be evicted for it)
    }
    case Decision::cpu:
      if (admit_behind) res_->admit(layer, expert, tick_);
      break;
  }
  counters_->cpu_expert(layer);
  r.w = res_->host_ptrs(layer, expert);
  return r;
}

void OffloadExecutor::predict_and_prefetch(const MoeStep& req) {
  if (!o_.predictor) return;
  predicted_.clear();
  o_.predictor->predict(req.layer, req.x, req.n_tokens, req.expert_ids, req.top_k, predicted_);
  res_->prefetch(predicted_, req.layer, tick_);
}

MoeStep OffloadExecutor::host_routing(const MoeStep& s) {
  routing_ready_ns_ = 0;
  if (device_->kind() != DeviceKind::cuda) return s;  // sim: device memory is host memory
  const size_t nx = static_cast<size_t>(s.n_tokens) * static_cast<size_t>(s.n_embd);
  const size_t nk = static_cast<size_t>(s.n_tokens) * static_cast<size_t>(s.top_k);
  const size_t bytes = (nx + 2 * nk) * 4;
  if (bytes > routing_host_.bytes()) {
    compute_->synchronize();  // an earlier copy out of the old buffer may still be queued
    routing_host_ = HostBuffer();
    routing_host_ = device_->alloc_host(bytes * 2, /*pinned=*/true);
  }
  auto* x = static_cast<float*>(routing_host_.data());
  auto* ids = reinterpret_cast<int32_t*>(x + nx);
  auto* w = reinterpret_cast<float*>(ids + nk);
  compute_->copy_d2h(x, s.x, nx * 4);
  compute_->copy_d2h(ids, s.expert_ids, nk * 4);
  compute_->copy_d2h(w, s.expert_weights, nk * 4);
  compute_->synchronize();
  routing_ready_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  MoeStep h = s;
  h.x = x;
  h.expert_ids = ids;
  h.expert_weights = w;
  return h;
}

void OffloadExecutor::run(const MoeStep& step) {
  check_step(step, res_->host_layers(), "offload");
  if (step.n_tokens == 0) return;
  if (tables_ && step.n_tokens == 1) {
    // From the device tables, on the forward's device routing: nothing is read on the host.
    tables_->run(step);
    // sim: the CPU forward reads `out` on return.
    if (device_->kind() != DeviceKind::cuda) compute_->synchronize();
    return;
  }
  const MoeStep req = host_routing(step);
  check_step_ids(req, res_->host_layer(req.layer).n_expert, "offload");
  if (tables_) tables_->invalidate();  // a host-routed step may change slots
  if (observed()) observers_->routing(req);
  run_host_routed(req, step);
  if (observed()) observers_->step_end(req.layer);
}

void OffloadExecutor::run_host_routed(const MoeStep& req, const MoeStep& dev) {
  const int32_t n_expert = res_->host_layer(req.layer).n_expert;
  counters_->add(Count::steps);
  StepPlan& plan = plan_;  // built here on the host, executed by the device step
  plan.experts.clear();
  plan.copy_wait0_ns = counters_->wait_ns(WaitCause::copy);
  plan.routing_ready_ns = routing_ready_ns_;
  counters_->vram_in_use(device_->memory().used_bytes);
  res_->poll();
  // Every slot pinned for this step is unpinned however the step ends, once compute_done_ covers
  // the kernels that may read it (a refill waits for it: Residency::fill_slot).
  std::vector<Resolved>& used = plan.experts;
  struct Unpin {
    OffloadExecutor& ex;
    const std::vector<Resolved>& used;
    ~Unpin() {
      try {
        ex.compute_->record(*ex.compute_done_);
      } catch (...) {
      }
      for (const Resolved& x : used)
        if (x.pinned_slot >= 0) ex.res_->unpin(x.pinned_slot);
    }
  } unpin{*this, used};
  const bool decode = req.n_tokens == 1;
  // Present experts first (pinned), then predictions may evict anything else, then the misses. A
  // token names each expert once (top-k): the streamed experts' pair lists rely on it.
  std::vector<int64_t>& count = count_;
  count.assign(static_cast<size_t>(n_expert), 0);
  for (int64_t t = 0; t < req.n_tokens; ++t)
    for (int32_t j = 0; j < req.top_k; ++j) {
      const int32_t e = req.expert_ids[t * req.top_k + j];
      for (int32_t i = 0; i < j; ++i)
        if (req.expert_ids[t * req.top_k + i] == e)
          fail(ErrorKind::internal, "MoE step layer {}: token {} routes to expert {} twice",
               req.layer, t, e);
      ++count[static_cast<size_t>(e)];
    }
  std::vector<int32_t>& missing = missing_;
  missing.clear();
  for (int32_t e = 0; e < n_expert; ++e) {
    if (count[static_cast<size_t>(e)] == 0) continue;
    if (decode && !res_->ready(req.layer, e)) {
      missing.push_back(e);
      continue;
    }
    used.push_back(resolve(req.layer, e, count[static_cast<size_t>(e)], decode));
  }
  predict_and_prefetch(req);
  for (int32_t e : missing) used.push_back(resolve(req.layer, e, 1, true));
  std::sort(used.begin(), used.end(),
            [](const Resolved& a, const Resolved& b) { return a.expert < b.expert; });
  step_->run(plan, req, dev, *counters_, o_.tracer);
  // The CPU forward reads `out` as soon as run() returns; the CUDA forward's next ops are queued
  // behind the kernels on the same stream.
  if (device_->kind() != DeviceKind::cuda) compute_->synchronize();
}

void OffloadExecutor::begin_step(int64_t n_tokens) {
  // The last table step's routing is counted at its own tick, before the clock moves on.
  read_routing_log();
  ++tick_;
  counters_->tokens(static_cast<uint64_t>(n_tokens));
  if (!tables_) return;
  res_->poll();
  if (n_tokens == 1) {
    counters_->add(Count::table_tokens);
    counters_->add(Count::table_updates, tables_->begin_step(
        res_->cache(), [this](int32_t slot, int32_t layer) { return res_->slot_ptrs(slot, layer); },
        observers_));
  }
}

void OffloadExecutor::end_step(int64_t n_tokens) {
  if (!tables_ || n_tokens != 1 || !tables_->pending()) return;
  tables_->end_step();
  // Slot refills (admissions, prefetches, copy-now) wait for this: every table kernel queued so
  // far may read any slot its table points at.
  compute_->record(*compute_done_);
}

void OffloadExecutor::read_routing_log() {
  if (!tables_ || !tables_->pending()) return;
  const int32_t E = o_.plan.in.n_expert;
  // Counted against the slots the step's tables pointed at (the cache has not changed since the
  // tables were synced), all before any admission evicts one.
  std::vector<std::pair<int32_t, int32_t>> admit;
  int32_t last_layer = -1;
  tables_->read_log(observers_, [&](int32_t l, int32_t e) {
    if (e < 0 || e >= E)
      fail(ErrorKind::internal, "offload: routing log layer {}: expert id {} outside [0, {})", l, e,
           E);
    if (l != last_layer) counters_->add(Count::steps);
    last_layer = l;
    bool found_slot = false;
    if (res_->use_in_place(l, e, tick_, found_slot)) {
      counters_->hit(l);
      return;
    }
    counters_->add(Count::mapped);
    counters_->add(Count::mapped_bytes, res_->shape(l).expert_bytes());
    counters_->miss(l);
    if (!found_slot && o_.admit) admit.emplace_back(l, e);
  });
  for (const auto& [l, e] : admit) res_->admit(l, e, tick_);
}

void OffloadExecutor::drain() {
  read_routing_log();  // the last table step's routing (its admissions are waited for below)
  device_->synchronize();
  res_->poll();
  step_->collect_waits(*counters_);
}

OffloadStats OffloadExecutor::stats() const {
  // Every counted figure comes from the one sink; the rest are the engine's state.
  const StatsSnapshot c = counters_->snapshot();
  OffloadStats s;
  const auto ev = [&](Count k) { return c.count(k); };
  s.steps = ev(Count::steps);
  s.tokens = c.tokens;
  s.hits = c.total.hit;
  s.uses = c.total.hit + c.total.miss;
  s.inflight = ev(Count::inflight);
  s.waited = ev(Count::waited);
  s.misses = c.total.miss - std::min(c.total.miss, s.inflight);
  s.cpu_experts = c.total.cpu_expert;
  s.copy_now = ev(Count::copy_now);
  s.streamed = ev(Count::streamed);
  s.mapped = ev(Count::mapped);
  s.mapped_bytes = ev(Count::mapped_bytes);
  s.table_tokens = ev(Count::table_tokens);
  s.table_updates = ev(Count::table_updates);
  s.init_bytes = ev(Count::init_bytes);
  s.cpu_ms = static_cast<double>(ev(Count::cpu_ns)) / 1e6;
  s.compute_ms = static_cast<double>(ev(Count::compute_ns)) / 1e6;
  s.stream_gpu_ms = static_cast<double>(ev(Count::stream_gpu_ns)) / 1e6;
  s.stream_bytes = ev(Count::stream_bytes);
  s.prefetch = prefetch_counters(c);
  s.h2d_bytes = c.total.h2d_bytes - std::min(c.total.h2d_bytes, s.prefetch.bytes);
  for (int w = 0; w < kWaitCauses; ++w)
    s.device_wait_ms[w] = static_cast<double>(c.wait_ns[static_cast<size_t>(w)]) / 1e6;
  s.wait_ms = s.device_wait_ms[static_cast<int>(WaitCause::copy)];
  for (const LayerCounts& l : c.layers) {
    s.layer_uses.push_back(l.hit + l.miss);
    s.layer_hits.push_back(l.hit);
  }
  s.cache = res_->cache().counters();
  s.memory = device_->memory();
  s.rates = cost_.rates();
  s.store = res_->store_stats();
  s.n_slots = o_.plan.n_slots;
  return s;
}

}  // namespace ferry
