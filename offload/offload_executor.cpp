#include "offload/offload_executor.hpp"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

ColdMode parse_cold_mode(std::string_view s) {
  if (s == "auto") return ColdMode::auto_;
  if (s == "cpu") return ColdMode::cpu;
  if (s == "copy") return ColdMode::copy;
  if (s == "mapped") return ColdMode::mapped;
  fail(ErrorKind::invalid_arg, "--cold '{}': expected auto, cpu, copy or mapped", s);
}

OffloadExecutor::OffloadExecutor(std::unique_ptr<Device> device,
                                 std::vector<MoeLayerWeights> layers, OffloadOptions options)
    : o_(std::move(options)), owned_device_(std::move(device)), layers_(std::move(layers)) {
  device_ = owned_device_.get();
  if (!device_) fail(ErrorKind::internal, "offload executor without a device");
  if (device_->kind() != DeviceKind::sim)
    fail(ErrorKind::invalid_arg,
         "the offload executor owns only sim devices; a {} device comes with its compute stream",
         device_kind_name(device_->kind()));
  if (o_.device_flow) {
    compute_ = device_->create_stream();
    kernels_ = make_sim_expert_kernels();
  }
  init();
}

OffloadExecutor::OffloadExecutor(Device& device, std::unique_ptr<Stream> compute,
                                 std::unique_ptr<DeviceExpertKernels> kernels,
                                 std::vector<MoeLayerWeights> layers, OffloadOptions options)
    : o_(std::move(options)), device_(&device), layers_(std::move(layers)), compute_(std::move(compute)),
      kernels_(std::move(kernels)) {
  if (!compute_ || !kernels_) fail(ErrorKind::internal, "offload device flow without a compute stream or kernels");
  o_.device_flow = true;
  init();
}

namespace {

size_t pad256(size_t n) { return (n + 255) / 256 * 256; }

// Byte offsets of the device flow's step buffer: table | weights | direct ids | the streamed
// experts' pairs (each expert's t·k + j, back to back; at most nk in all).
struct StepLayout {
  size_t off_w, off_ids, off_pairs, total;
  StepLayout(size_t n_table, int64_t nk)
      : off_w(pad256(n_table * sizeof(ExpertPtrs3))),
        off_ids(off_w + pad256(static_cast<size_t>(nk) * 4)),
        off_pairs(off_ids + pad256(static_cast<size_t>(nk) * 4)),
        total(off_pairs + pad256(static_cast<size_t>(nk) * 4)) {}
  // The largest step of n tokens: every expert in the table, plus the two staging entries.
  static StepLayout worst(int64_t n, int32_t top_k, int32_t n_expert) {
    return StepLayout(static_cast<size_t>(n_expert) + 2, n * top_k);
  }
};

}  // namespace

uint64_t device_flow_step_bytes(int64_t max_batch, const ExpertShape& s, int32_t top_k, int32_t n_expert) {
  const auto n = static_cast<uint64_t>(max_batch);
  return StepLayout::worst(max_batch, top_k, n_expert).total +
         pad256(static_cast<size_t>(n * static_cast<uint64_t>(s.n_embd) * 4)) +
         pad256(static_cast<size_t>(n * static_cast<uint64_t>(top_k) * static_cast<uint64_t>(s.n_ff) * 4));
}

void OffloadExecutor::init() {
  const Plan& plan = o_.plan;
  const auto L = static_cast<int32_t>(layers_.size());
  if (L != plan.in.n_layer)
    fail(ErrorKind::internal, "offload plan for {} layers, model has {}", plan.in.n_layer, L);
  for (int32_t l = 0; l < L; ++l) {
    const MoeLayerWeights& w = layers_[static_cast<size_t>(l)];
    shapes_.push_back(expert_shape(w));
    const ExpertShape& sh = shapes_.back();
    const uint64_t slot_bytes = plan.in.layer_expert_bytes.at(static_cast<size_t>(l));
    if (w.n_expert != plan.in.n_expert || sh.expert_bytes() != slot_bytes)
      fail(ErrorKind::internal,
           "offload plan: layer {} has {} experts of {} B, plan {} experts in slots of {} B", l,
           w.n_expert, sh.expert_bytes(), plan.in.n_expert, slot_bytes);
    // The device kernels read each matrix of a slot with 16-byte loads and one type for gate/up.
    if (compute_ && (sh.gate_bytes() % 16 || sh.up_bytes() % 16 || sh.down_bytes() % 16))
      fail(ErrorKind::unsupported, "offload: layer {}: expert matrices of {}/{}/{} bytes are not 16-byte multiples",
           l, sh.gate_bytes(), sh.up_bytes(), sh.down_bytes());
    if (compute_ && sh.gate_type != sh.up_type)
      fail(ErrorKind::unsupported, "offload: layer {}: gate ({}) and up ({}) experts of different types", l,
           type_name(sh.gate_type), type_name(sh.up_type));
  }

  // Host store: the three expert tensors of every layer, then views with the same layout.
  std::vector<StoreRegion> regions;
  for (int32_t l = 0; l < L; ++l) {
    const MoeLayerWeights& w = layers_[static_cast<size_t>(l)];
    const ExpertTensor* t[3] = {&w.gate, &w.up, &w.down};
    for (int i = 0; i < 3; ++i) {
      const uint64_t off =
          o_.host_load == HostLoad::alias ? 0 : o_.file_offsets.at(static_cast<size_t>(l))[i];
      regions.push_back(
          {off, t[i]->expert_stride_bytes * static_cast<uint64_t>(w.n_expert), t[i]->base});
    }
  }
  store_ = std::make_unique<HostStore>(device_, o_.gguf_path, std::move(regions),
                                       o_.host_load, o_.progress);
  for (int32_t l = 0; l < L; ++l) {
    MoeLayerWeights& w = layers_[static_cast<size_t>(l)];
    w.gate.base = store_->data(static_cast<size_t>(3 * l));
    w.up.base = store_->data(static_cast<size_t>(3 * l + 1));
    w.down.base = store_->data(static_cast<size_t>(3 * l + 2));
  }
  if (o_.decode_table && !compute_)
    fail(ErrorKind::invalid_arg, "--offload-decode table needs the device flow (cuda, or --sim-flow device on sim)");
  const bool need_mapped = o_.cold == ColdMode::mapped || o_.decode_table;
  if (need_mapped && !compute_)
    fail(ErrorKind::invalid_arg, "--cold mapped needs the device flow (cuda, or --sim-flow device on sim)");
  if (compute_ && (need_mapped || (o_.cold == ColdMode::auto_ && device_->kind() == DeviceKind::cuda))) {
    // The same layers as the device sees the host store (expert_ptrs then serves both). On cuda
    // with the cost model (auto), reading in place is one more choice when the store is mapped
    // (the sim device's "kernels" are the CPU's: there it is a forced mode only).
    mapped_ = layers_;
    bool unmapped = false;
    for (MoeLayerWeights& w : mapped_)
      for (ExpertTensor* t : {&w.gate, &w.up, &w.down}) {
        t->base = static_cast<const uint8_t*>(device_->mapped_view(t->base));
        unmapped = unmapped || !t->base;
        if (!t->base && need_mapped)
          fail(ErrorKind::unsupported,
               "{}: the {} host store is not readable by the device in place (use --host-load uring, "
               "which pins it)",
               o_.decode_table ? "--offload-decode table" : "--cold mapped", host_load_name(o_.host_load));
      }
    if (unmapped) mapped_.clear();  // auto: reading in place is simply not a choice
  }

  // Device memory, in plan order; every allocation is charged to the budget.
  if (o_.reserve_fixed) {
    const std::pair<uint64_t, const char*> fixed[] = {
        {plan.in.dense_bytes, "dense weights (reserved)"},
        {plan.in.kv_bytes, "KV cache (reserved)"},
        {plan.in.state_bytes, "recurrent state (reserved)"},
        {plan.in.workspace_bytes, "workspace (reserved)"}};
    for (const auto& [bytes, tag] : fixed)
      if (bytes) reserved_.push_back(device_->alloc(bytes, tag));
  }
  staging_ = device_->alloc(plan.staging_bytes, "prefill staging slots");
  if (plan.n_slots > 0)
    slots_ = device_->alloc(plan.slots_bytes(), "expert slots");

  cache_ = std::make_unique<ExpertCache>(plan.n_slots, L, plan.in.n_expert, o_.policy,
                                         plan.slot_partition());
  prefetcher_ = std::make_unique<Prefetcher>(
      *device_, *cache_,
      [this](int32_t slot, int32_t l, int32_t e, Stream& s) { fill_slot(slot, l, e, s); },
      plan.in.layer_expert_bytes,
      // Table decode admits a whole token's misses at once (before the next step), not one layer
      // at a time: room for one token's worth in flight.
      o_.decode_table ? std::max(o_.prefetch_in_flight, L * plan.in.n_expert_used) : o_.prefetch_in_flight);
  demand_ = device_->create_stream();
  demand_done_ = device_->create_event();
  for (auto& e : staging_done_) e = device_->create_event();
  if (compute_) {
    compute_done_ = device_->create_event();
    for (auto& e : staging_free_) e = device_->create_event();
    for (auto* e : {&kernels_done_, &cpu_ready_, &stream_begin_, &stream_end_}) *e = device_->create_event();
    st_.device_flow = true;
    // Step buffers for max_batch tokens now, so a plan's step_bytes covers them.
    const StepLayout worst = StepLayout::worst(o_.max_batch, plan.in.n_expert_used, plan.in.n_expert);
    step_host_ = device_->alloc_host(worst.total, true);
    step_dev_ = device_->alloc(worst.total, "offload step table");
    int64_t max_embd = 0;
    for (const ExpertShape& sh : shapes_) max_embd = std::max(max_embd, sh.n_embd);
    const size_t partial = static_cast<size_t>(o_.max_batch * max_embd) * sizeof(float);
    partial_host_ = device_->alloc_host(partial, true);
    partial_dev_ = device_->alloc(partial, "offload cpu expert sum");
  }
  if (o_.decode_table) {
    const auto E = static_cast<size_t>(plan.in.n_expert), K = static_cast<size_t>(plan.in.n_expert_used);
    const size_t n = static_cast<size_t>(L) * E;
    tables_dev_ = device_->alloc(n * sizeof(ExpertPtrs3), "expert tables (decode)");
    log_dev_ = device_->alloc(static_cast<size_t>(L) * K * 4, "routing log (decode)");
    tables_host_ = device_->alloc_host(n * sizeof(ExpertPtrs3), true);
    log_host_ = device_->alloc_host(static_cast<size_t>(L) * K * 4, true);
    if (!tables_host_.pinned() || !log_host_.pinned())
      fail(ErrorKind::device, "--offload-decode table: pinned host memory for the tables could not be allocated");
    std::fill_n(static_cast<ExpertPtrs3*>(tables_host_.data()), n, ExpertPtrs3{});  // nothing copied yet
    for (int32_t l = 0; l < L; ++l)
      for (int32_t e = 0; e < plan.in.n_expert; ++e)
        tables_mapped_.push_back(expert_ptrs(mapped_[static_cast<size_t>(l)], e));
    tables_copied_ = device_->create_event();
    log_ready_ = device_->create_event();
    logged_.assign(static_cast<size_t>(L), 0);
  }

  // Initial hot set, then one synchronisation.
  for (int32_t l = 0; l < L; ++l)
    for (int32_t e : plan.hot[static_cast<size_t>(l)]) {
      const int32_t slot = cache_->insert(l, e, 0);
      if (slot < 0)
        fail(ErrorKind::internal, "offload: no slot for the initial hot set (layer {} expert {})",
             l, e);
      fill_slot(slot, l, e, *demand_);
      st_.init_bytes += shapes_[static_cast<size_t>(l)].expert_bytes();
    }
  demand_->synchronize();
  for (int32_t s = 0; s < cache_->n_slots(); ++s)
    if (cache_->state(s) == SlotState::loading) cache_->mark_ready(s);
  cache_->reset_counters();

  if (o_.rates) {
    cost_ = CostModel(*o_.rates);
  } else {
    // Calibrate with expert 0 of layer 0, copied into a staging slot.
    HardwareRates r = calibrate_rates(*device_, shapes_[0], host_ptrs(0, 0), staging_.data());
    if (compute_)
      if (const double g = measure_device_rate(staging_ptrs(0, 0)); g > 0) r.device_gbps = g;
    // The same kernels reading experts in place (0 when it cannot be measured: never chosen).
    if (!mapped_.empty() && device_->kind() == DeviceKind::cuda)
      r.mapped_gbps = measure_mapped_rate();
    cost_ = CostModel(r);
  }
  st_.layer_uses.assign(static_cast<size_t>(L), 0);
  st_.layer_hits.assign(static_cast<size_t>(L), 0);
}

OffloadExecutor::~OffloadExecutor() {
  // Copies may still read the host store or write slots: let every stream drain first.
  try {
    device_->synchronize();
  } catch (...) {
  }
}

namespace {

// An expert packed at `base` (a cache or staging slot): gate, up, down back to back.
ExpertPtrs3 packed(const uint8_t* base, const ExpertShape& s) {
  return ExpertPtrs3{base, base + s.gate_bytes(), base + s.gate_bytes() + s.up_bytes()};
}

}  // namespace

ExpertPtrs3 OffloadExecutor::slot_ptrs(int32_t slot, int32_t layer) const {
  return packed(static_cast<const uint8_t*>(slots_.data()) + o_.plan.slot_offset(slot),
                shapes_[static_cast<size_t>(layer)]);
}

ExpertPtrs3 OffloadExecutor::staging_ptrs(size_t b, int32_t layer) const {
  return packed(static_cast<const uint8_t*>(staging_.data()) + b * o_.plan.staging_slot_bytes,
                shapes_[static_cast<size_t>(layer)]);
}

ExpertPtrs3 OffloadExecutor::host_ptrs(int32_t layer, int32_t expert) const {
  return expert_ptrs(layers_[static_cast<size_t>(layer)], expert);
}

int32_t OffloadExecutor::track_of(const Stream& s) {
  constexpr int32_t kCopyTrack0 = Tracer::kTrackBase;
  for (size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == &s) return kCopyTrack0 + static_cast<int32_t>(i);
  tracks_.push_back(&s);
  const auto id = kCopyTrack0 + static_cast<int32_t>(tracks_.size() - 1);
  o_.tracer->set_track_name(id, &s == demand_.get() ? "copies: demand / staging"
                                                    : "copies: prefetch " + std::to_string(tracks_.size() - 1));
  return id;
}

void OffloadExecutor::traced_copy(Stream& s, int32_t layer, int32_t expert, uint64_t bytes,
                                  const std::function<void()>& issue) {
  Tracer* t = o_.tracer;
  if (!t || !t->enabled()) return issue();
  const int32_t track = track_of(s);
  auto t0 = std::make_shared<int64_t>(0);
  s.host_fn([t, t0] { *t0 = t->now_ns(); });
  issue();
  s.host_fn([t, t0, track, layer, expert, bytes] {
    t->complete("h2d", "copy", *t0, t->now_ns() - *t0,
                {{"layer", layer}, {"expert", expert}, {"bytes", static_cast<int64_t>(bytes)}}, track);
  });
}

void OffloadExecutor::fill_slot(int32_t slot, int32_t layer, int32_t expert, Stream& s) {
  const ExpertShape& sh = shapes_[static_cast<size_t>(layer)];
  const ExpertPtrs3 src = host_ptrs(layer, expert), dst = slot_ptrs(slot, layer);
  // Device flow: kernels queued on the compute stream may still read this slot's old expert.
  if (compute_done_) s.wait(*compute_done_);
  traced_copy(s, layer, expert, sh.expert_bytes(), [&] {
    s.copy_h2d(const_cast<uint8_t*>(dst.gate), src.gate, sh.gate_bytes());
    s.copy_h2d(const_cast<uint8_t*>(dst.up), src.up, sh.up_bytes());
    s.copy_h2d(const_cast<uint8_t*>(dst.down), src.down, sh.down_bytes());
  });
}

void OffloadExecutor::stage(int32_t layer, const Resolved& r, size_t b) {
  const ExpertShape& shape = shapes_[static_cast<size_t>(layer)];
  const ExpertPtrs3 dst = staging_ptrs(b, layer);
  traced_copy(*demand_, layer, r.expert, shape.expert_bytes(), [&] {
    demand_->copy_h2d(const_cast<uint8_t*>(dst.gate), r.w.gate, shape.gate_bytes());
    demand_->copy_h2d(const_cast<uint8_t*>(dst.up), r.w.up, shape.up_bytes());
    demand_->copy_h2d(const_cast<uint8_t*>(dst.down), r.w.down, shape.down_bytes());
  });
  demand_->record(*staging_done_[b]);
  st_.h2d_bytes += shape.expert_bytes();
}

OffloadExecutor::Resolved OffloadExecutor::resolve(int32_t layer, int32_t expert, int64_t n_tokens,
                                                   uint64_t now, bool decode) {
  Resolved r;
  r.expert = expert;
  const uint64_t bytes = shapes_[static_cast<size_t>(layer)].expert_bytes();
  ++st_.uses;
  ++st_.layer_uses[static_cast<size_t>(layer)];
  int32_t slot = cache_->access(layer, expert, now);
  // --cold mapped, decode: what is not ready in a slot is read in place over the link; with the
  // cost model (cuda, mapped store) that is one of its choices for a decode miss.
  const bool map_now = o_.cold == ColdMode::mapped && decode;
  const bool map_ok = o_.cold == ColdMode::auto_ && decode && !mapped_.empty();
  const auto read_mapped = [&] {
    ++st_.mapped;
    st_.mapped_bytes += bytes;
    r.mapped = true;
    r.w = expert_ptrs(mapped_[static_cast<size_t>(layer)], expert);
  };
  if (slot >= 0 && prefetcher_->in_flight(slot)) {
    ++st_.inflight;
    if (map_now) {
      if (counters_) counters_->miss(layer);
      read_mapped();
      return r;
    }
    const double remaining = std::max(0.0, cost_.copy_us(bytes) - prefetcher_->age_us(slot));
    const ColdChoice c = o_.cold == ColdMode::cpu    ? ColdChoice::cpu
                         : o_.cold == ColdMode::copy ? ColdChoice::wait_prefetch
                                                     : cost_.choose(bytes, n_tokens, remaining, 0, map_ok);
    if (counters_) counters_->miss(layer);
    if (c == ColdChoice::mapped) {
      read_mapped();
      return r;
    }
    if (c == ColdChoice::cpu) {
      ++st_.cpu_experts;
      if (counters_) counters_->cpu_expert(layer);
      r.w = host_ptrs(layer, expert);
      return r;
    }
    const auto t0 = Clock::now();
    {
      Tracer::Span span(o_.tracer, "wait prefetch", "wait", {{"layer", layer}, {"expert", expert}});
      prefetcher_->wait(slot);
    }
    st_.wait_ms += ms_since(t0);
    ++st_.waited;
  } else if (slot >= 0) {
    ++st_.hits;
    ++st_.layer_hits[static_cast<size_t>(layer)];
    if (counters_) counters_->hit(layer);
  }
  if (slot >= 0) {
    prefetcher_->note_use(slot);
    cache_->pin(slot);
    r.pinned_slot = slot;
    r.w = slot_ptrs(slot, layer);
    return r;
  }
  ++st_.misses;
  if (counters_) counters_->miss(layer);
  if (map_now) {
    read_mapped();
    if (o_.admit) prefetcher_->admit(layer, expert, now);  // the cache still follows the routing
    return r;
  }
  const ColdChoice c = o_.cold == ColdMode::cpu    ? ColdChoice::cpu
                       : o_.cold == ColdMode::copy ? ColdChoice::copy_now
                                                   : cost_.choose(bytes, n_tokens, -1, 0, map_ok);
  if (c == ColdChoice::mapped) {
    read_mapped();
    if (o_.admit) prefetcher_->admit(layer, expert, now);
    return r;
  }
  if (c == ColdChoice::copy_now &&
      n_tokens > 1) {  // prefill: stream through staging, keep the cache
    ++st_.streamed;
    if (counters_) counters_->h2d(layer, bytes);
    r.stream = true;
    r.w = host_ptrs(layer, expert);
    return r;
  }
  if (c == ColdChoice::copy_now && (slot = cache_->insert(layer, expert, now)) >= 0) {
    prefetcher_->note_evict(slot);
    cache_->pin(slot);
    fill_slot(slot, layer, expert, *demand_);
    demand_->record(*demand_done_);
    const auto t0 = Clock::now();
    {
      Tracer::Span span(o_.tracer, "wait copy", "wait", {{"layer", layer}, {"expert", expert}});
      demand_done_->synchronize();
    }
    const double waited_ms = ms_since(t0);
    st_.wait_ms += waited_ms;
    cache_->mark_ready(slot);
    ++st_.copy_now;
    st_.h2d_bytes += bytes;
    if (counters_) {
      counters_->h2d(layer, bytes);
      counters_->wait(WaitCause::copy, static_cast<uint64_t>(waited_ms * 1e6));
    }
    r.pinned_slot = slot;
    r.w = slot_ptrs(slot, layer);
    return r;
  }
  ++st_.cpu_experts;  // chosen, or no evictable slot for a copy
  if (counters_) counters_->cpu_expert(layer);
  r.w = host_ptrs(layer, expert);
  // Decode: bring it in behind the CPU compute, so the cache follows the routing's locality (a
  // prefill would push out the decode working set for experts used once).
  if (decode && o_.admit && c != ColdChoice::copy_now)
    prefetcher_->admit(layer, expert, now);
  return r;
}

void OffloadExecutor::predict_and_prefetch(const MoeRequest& req) {
  if (!o_.predictor) return;
  predicted_.clear();
  o_.predictor->predict(req.layer, req.x, req.n_tokens, req.expert_ids, req.top_k, predicted_);
  for (const PredictedExpert& p : predicted_)
    if (p.layer < o_.plan.in.n_layer && p.expert >= 0 && p.expert < o_.plan.in.n_expert)
      prefetcher_->request(
          p);  // stale ones (p.layer <= req.layer) are dropped and counted by issue()
  prefetcher_->issue(req.layer, tick_);
}

void OffloadExecutor::run(const MoeRequest& req) {
  const auto L = static_cast<int32_t>(layers_.size());
  if (req.layer < 0 || req.layer >= L)
    fail(ErrorKind::internal, "MoE step for layer {}: the executor has {} layers", req.layer, L);
  const MoeLayerWeights& W = layers_[static_cast<size_t>(req.layer)];
  if (req.n_embd != W.gate.n_in)
    fail(ErrorKind::internal, "MoE step layer {}: n_embd {} but experts take {}", req.layer,
         req.n_embd, W.gate.n_in);
  if (req.top_k <= 0 || req.n_tokens < 0)
    fail(ErrorKind::internal, "MoE step layer {}: top_k {} n_tokens {}", req.layer, req.top_k,
         req.n_tokens);
  // On cuda the routing must be host copies (read below), except for a step from the device
  // tables: without the bridge it is device memory.
  if (device_->kind() == DeviceKind::cuda && !req.device) {
    if (!device_routing(req.n_tokens))
      fail(ErrorKind::internal, "cuda offload: MoE step without host routing (the engine puts the host bridge in front)");
    return run_table(req);
  }
  for (int64_t i = 0; i < int64_t{req.n_tokens} * req.top_k; ++i)
    if (req.expert_ids[i] < 0 || req.expert_ids[i] >= W.n_expert)
      fail(ErrorKind::internal, "MoE step layer {}: expert id {} outside [0, {})", req.layer,
           req.expert_ids[i], W.n_expert);
  if (req.n_tokens == 0) return;
  if (o_.decode_table && req.n_tokens == 1 && device_->kind() != DeviceKind::cuda) {
    // sim: the forward's host buffers are the device's; the CPU forward reads `out` on return.
    run_table(req);
    compute_->synchronize();
    return;
  }
  tables_synced_ = false;  // a host-routed step may change slots: the tables are synced again
  if (o_.decode_table && req.n_tokens == 1 && !warned_host_decode_) {
    warned_host_decode_ = true;
    log::warn("--offload-decode table: decode steps arrive with host routing (--stats, --trace and "
              "--record-routing need it), so they take the host path");
  }
  if (o_.record) o_.record->add(req.layer, req.expert_ids, req.n_tokens, req.top_k);
  // One tick per forward step: a step starts when the layer index does not increase.
  if (req.layer <= last_layer_ || last_layer_ < 0) {
    ++tick_;
    st_.tokens += static_cast<uint64_t>(req.n_tokens);
  }
  last_layer_ = req.layer;
  ++st_.steps;
  step_wait0_ = st_.wait_ms;
  if (counters_) counters_->vram_in_use(device_->memory().used_bytes);
  prefetcher_->poll();
  y_.resize(static_cast<size_t>(req.n_tokens) * static_cast<size_t>(req.top_k) *
            static_cast<size_t>(req.n_embd));
  // Every slot pinned for this step is unpinned however the step ends — in the device flow only
  // once compute_done_ covers the kernels that read it (a refill waits for it: fill_slot).
  std::vector<Resolved> used;
  struct Unpin {
    OffloadExecutor& ex;
    const std::vector<Resolved>& used;
    ~Unpin() {
      if (ex.compute_ && !ex.step_recorded_) try {
          ex.compute_->record(*ex.compute_done_);
        } catch (...) {
        }
      for (const Resolved& x : used)
        if (x.pinned_slot >= 0) ex.cache_->unpin(x.pinned_slot);
    }
  } unpin{*this, used};
  step_recorded_ = false;
  if (req.n_tokens == 1) {
    std::vector<Resolved>& r = used;
    // Present experts first (pinned), then predictions may evict anything else, then the misses.
    std::vector<int32_t> missing;
    for (int32_t s = 0; s < req.top_k; ++s) r.push_back(Resolved{});
    for (int32_t s = 0; s < req.top_k; ++s) {
      const int32_t e = req.expert_ids[s];
      const int32_t slot = cache_->find(req.layer, e);
      if (slot >= 0 && cache_->state(slot) == SlotState::ready)
        r[static_cast<size_t>(s)] = resolve(req.layer, e, 1, tick_, true);
      else
        missing.push_back(s);
    }
    predict_and_prefetch(req);
    for (int32_t s : missing)
      r[static_cast<size_t>(s)] = resolve(req.layer, req.expert_ids[s], 1, tick_, true);
    if (compute_)
      run_device(req, r);
    else
      run_decode(req, r);
  } else {
    if (compute_) {
      // Resolve (and pin) this step's experts before predictions may evict slots. A token names
      // each expert once (top-k): the streamed experts' pair lists rely on it.
      std::vector<int64_t> count(static_cast<size_t>(W.n_expert), 0);
      for (int64_t t = 0; t < req.n_tokens; ++t)
        for (int32_t j = 0; j < req.top_k; ++j) {
          const int32_t e = req.expert_ids[t * req.top_k + j];
          for (int32_t i = 0; i < j; ++i)
            if (req.expert_ids[t * req.top_k + i] == e)
              fail(ErrorKind::internal, "MoE step layer {}: token {} routes to expert {} twice", req.layer, t, e);
          ++count[static_cast<size_t>(e)];
        }
      for (int32_t e = 0; e < W.n_expert; ++e)
        if (count[static_cast<size_t>(e)] > 0)
          used.push_back(resolve(req.layer, e, count[static_cast<size_t>(e)], tick_, false));
      predict_and_prefetch(req);
      run_device(req, used);
    } else {
      predict_and_prefetch(req);
      run_prefill(req, used);
    }
  }
}

namespace {

// Grows a pinned host buffer to at least `bytes` (old contents dropped).
void grow(Device& dev, HostBuffer& b, size_t bytes) {
  if (bytes > b.bytes()) {
    b = HostBuffer();
    b = dev.alloc_host(bytes, /*pinned=*/true);
  }
}

}  // namespace

void OffloadExecutor::grow_device(DeviceBuffer& b, size_t bytes, const char* tag) {
  if (bytes <= b.bytes()) return;
  compute_->synchronize();  // queued kernels may still read the old buffer
  b = DeviceBuffer();
  b = device_->alloc(bytes, tag);
}

void OffloadExecutor::cpu_part(const MoeRequest& req, const std::vector<Resolved>& cpu, float* partial) {
  // The CPU experts' weighted sum over their own (token, slot) pairs, slots added in order.
  const ExpertShape& shape = shapes_[static_cast<size_t>(req.layer)];
  const int64_t E = req.n_embd, K = req.top_k, n = req.n_tokens;
  std::vector<uint8_t> on_cpu(static_cast<size_t>(layers_[static_cast<size_t>(req.layer)].n_expert), 0);
  for (const Resolved& x : cpu) on_cpu[static_cast<size_t>(x.expert)] = 1;
  if (n == 1) {
    std::vector<ExpertPtrs3> w(static_cast<size_t>(K));
    std::vector<uint8_t> mask(static_cast<size_t>(K), 0);
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = req.expert_ids[j];
      mask[static_cast<size_t>(j)] = on_cpu[static_cast<size_t>(e)];
      if (mask[static_cast<size_t>(j)]) w[static_cast<size_t>(j)] = host_ptrs(req.layer, e);
    }
    compute_decode(shape, req.x, w, mask, y_.data());
  } else {
    const ExpertBatch batch(shape, req, layers_[static_cast<size_t>(req.layer)].n_expert);
    tbb::parallel_for(tbb::blocked_range<size_t>(0, cpu.size(), 1), [&](const tbb::blocked_range<size_t>& rg) {
      for (size_t i = rg.begin(); i < rg.end(); ++i) {
        Tracer::Span span(o_.tracer, "cpu expert", "compute",
                          {{"layer", req.layer}, {"expert", cpu[i].expert}, {"tokens", batch.group_size(cpu[i].expert)}});
        batch.compute_group(cpu[i].expert, cpu[i].w, y_.data());
      }
    });
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1), [&](const tbb::blocked_range<int64_t>& rg) {
    for (int64_t t = rg.begin(); t < rg.end(); ++t) {
      float* out = partial + t * E;
      std::fill(out, out + E, 0.0f);
      for (int64_t j = 0; j < K; ++j) {
        if (!on_cpu[static_cast<size_t>(req.expert_ids[t * K + j])]) continue;
        const float w = req.expert_weights[t * K + j];
        const float* y = y_.data() + (t * K + j) * E;
        for (int64_t d = 0; d < E; ++d) out[d] += y[d] * w;
      }
    }
  });
}

void OffloadExecutor::run_device(const MoeRequest& req, const std::vector<Resolved>& used) {
  const ExpertShape& shape = shapes_[static_cast<size_t>(req.layer)];
  const MoeLayerWeights& W = layers_[static_cast<size_t>(req.layer)];
  const int64_t n = req.n_tokens, K = req.top_k, E = req.n_embd, nk = n * K;
  const float* x_dev = req.device ? req.device->x : req.x;  // sim: host memory is device memory
  const auto t0 = Clock::now();
  // The host staging buffers are rewritten below: the copies of the previous step must have run
  // (on cuda the bridge's synchronisation has already seen to it; this is then a no-op).
  compute_done_->synchronize();
  collect_device_waits();

  // The step's table: slot experts first, then the two staging slots; local ids per pair.
  std::vector<ExpertPtrs3> table;
  std::vector<int32_t> index(static_cast<size_t>(W.n_expert), -1);
  std::vector<Resolved> cpu, streamed;
  for (const Resolved& x : used) {
    if (x.pinned_slot >= 0 || x.mapped) {  // x.w: slot addresses, or mapped host store addresses
      index[static_cast<size_t>(x.expert)] = static_cast<int32_t>(table.size());
      table.push_back(x.w);
    } else if (x.stream) {
      streamed.push_back(x);
    } else {
      cpu.push_back(x);
    }
  }
  const auto n_direct = static_cast<int32_t>(table.size());
  for (size_t b = 0; b < 2; ++b) table.push_back(staging_ptrs(b, req.layer));
  // Layout (host and device alike): table | weights | direct ids | streamed pairs.
  const StepLayout lay(table.size(), nk);
  const size_t off_w = lay.off_w, off_ids = lay.off_ids, off_pairs = lay.off_pairs, total = lay.total;
  grow(*device_, step_host_, total);
  grow_device(step_dev_, total, "offload step table");
  auto* h = static_cast<uint8_t*>(step_host_.data());
  std::copy(table.begin(), table.end(), reinterpret_cast<ExpertPtrs3*>(h));
  std::copy(req.expert_weights, req.expert_weights + nk, reinterpret_cast<float*>(h + off_w));
  auto* ids = reinterpret_cast<int32_t*>(h + off_ids);
  for (int64_t i = 0; i < nk; ++i) ids[i] = index[static_cast<size_t>(req.expert_ids[i])];
  // Pairs of each streamed expert, in token order: a counting pass over the routing.
  std::vector<int32_t> stream_index(static_cast<size_t>(W.n_expert), -1);
  for (size_t i = 0; i < streamed.size(); ++i) stream_index[static_cast<size_t>(streamed[i].expert)] = static_cast<int32_t>(i);
  std::vector<int64_t> pair_start(streamed.size() + 1, 0);
  for (int64_t p = 0; p < nk; ++p)
    if (const int32_t s = stream_index[static_cast<size_t>(req.expert_ids[p])]; s >= 0) ++pair_start[static_cast<size_t>(s) + 1];
  for (size_t i = 0; i < streamed.size(); ++i) pair_start[i + 1] += pair_start[i];
  {
    auto* pairs = reinterpret_cast<int32_t*>(h + off_pairs);
    std::vector<int64_t> fill(pair_start.begin(), pair_start.end() - 1);
    for (int64_t p = 0; p < nk; ++p)
      if (const int32_t s = stream_index[static_cast<size_t>(req.expert_ids[p])]; s >= 0)
        pairs[fill[static_cast<size_t>(s)]++] = static_cast<int32_t>(p);
  }
  if (req.device && req.device->ready_ns > 0) {
    // The compute stream idled from the routing's arrival until this first enqueue, less what the
    // host spent waiting on copies (counted as copy).
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    const double idle_ms = std::max(0.0, static_cast<double>(now - req.device->ready_ns) / 1e6 - (st_.wait_ms - step_wait0_));
    st_.device_wait_ms[static_cast<int>(WaitCause::sync)] += idle_ms;
    if (counters_) counters_->wait(WaitCause::sync, static_cast<uint64_t>(idle_ms * 1e6));
  }
  compute_->copy_h2d(step_dev_.data(), h, total);
  auto* d = static_cast<uint8_t*>(step_dev_.data());
  const auto* d_table = reinterpret_cast<const ExpertPtrs3*>(d);
  const auto* d_w = reinterpret_cast<const float*>(d + off_w);

  Tracer::Span span(o_.tracer, "experts", "compute",
                    {{"layer", req.layer},
                     {"experts", static_cast<int64_t>(used.size())},
                     {"cpu", static_cast<int64_t>(cpu.size())},
                     {"streamed", static_cast<int64_t>(streamed.size())}});
  // Slot experts (one launch; it also overwrites `out` for the pairs computed elsewhere).
  if (n_direct > 0)
    kernels_->experts(shape, d_table, reinterpret_cast<const int32_t*>(d + off_ids), d_w, n, static_cast<int32_t>(K),
                      x_dev, req.out, /*accumulate=*/false, *compute_);
  else
    compute_->memset(req.out, 0, static_cast<size_t>(n * E) * sizeof(float));
  // Streamed experts: copy i+2 waits for the kernels that read copy i; the compute stream waits
  // for each copy. The host only enqueues.
  if (!streamed.empty()) {
    compute_->record(*stream_begin_);
    st_.stream_bytes += shape.expert_bytes() * streamed.size();
  }
  for (size_t i = 0; i < streamed.size(); ++i) {
    const size_t b = i % 2;
    demand_->wait(*staging_free_[b]);
    stage(req.layer, streamed[i], b);
    compute_->wait(*staging_done_[b]);
    kernels_->expert_pairs(shape, d_table + n_direct + b,
                           reinterpret_cast<const int32_t*>(d + off_pairs) + pair_start[i],
                           pair_start[i + 1] - pair_start[i], d_w, static_cast<int32_t>(K), x_dev, req.out, *compute_);
    compute_->record(*staging_free_[b]);
  }
  if (!streamed.empty()) {
    compute_->record(*stream_end_);
    pending_stream_ = true;
  }
  // CPU experts while the device works; their sum is added on the compute stream.
  if (!cpu.empty()) {
    compute_->record(*kernels_done_);
    const auto tc = Clock::now();
    const size_t bytes = static_cast<size_t>(n * E) * sizeof(float);
    grow(*device_, partial_host_, bytes);
    cpu_part(req, cpu, static_cast<float*>(partial_host_.data()));
    grow_device(partial_dev_, bytes, "offload cpu expert sum");
    compute_->record(*cpu_ready_);  // the device idled from kernels_done_ to here if it finished first
    pending_cpu_wait_ = true;
    compute_->copy_h2d(partial_dev_.data(), partial_host_.data(), bytes);
    kernels_->add(req.out, partial_dev_.f32(), n * E, *compute_);
    st_.cpu_ms += ms_since(tc);
  }
  compute_->record(*compute_done_);
  step_recorded_ = true;  // run() unpins the slots on return: a refill waits for compute_done_
  // The CPU forward reads `out` as soon as run() returns; the CUDA forward's next ops are queued
  // behind the kernels on the same stream.
  if (device_->kind() != DeviceKind::cuda) compute_->synchronize();
  st_.compute_ms += ms_since(t0);
}

void OffloadExecutor::run_decode(const MoeRequest& req, std::vector<Resolved>& r) {
  std::vector<ExpertPtrs3> w;
  std::vector<uint8_t> all(r.size(), 1);
  int64_t on_host = 0;
  for (const Resolved& x : r) {
    w.push_back(x.w);
    on_host += x.pinned_slot < 0;
  }
  const auto t0 = Clock::now();
  Tracer::Span span(o_.tracer, "experts", "compute",
                    {{"layer", req.layer}, {"experts", static_cast<int64_t>(r.size())}, {"cpu", on_host}});
  compute_decode(shapes_[static_cast<size_t>(req.layer)], req.x, w, all, y_.data());
  weighted_sum(req, y_.data());
  st_.compute_ms += ms_since(t0);
}

void OffloadExecutor::run_prefill(const MoeRequest& req, std::vector<Resolved>& used) {
  const MoeLayerWeights& W = layers_[static_cast<size_t>(req.layer)];
  const ExpertShape& shape = shapes_[static_cast<size_t>(req.layer)];
  const ExpertBatch batch(shape, req, W.n_expert);
  std::vector<Resolved> direct, streamed;
  for (int32_t e = 0; e < W.n_expert; ++e) {
    if (batch.group_size(e) == 0) continue;
    Resolved r = resolve(req.layer, e, batch.group_size(e), tick_, false);
    used.push_back(r);  // unpinned by run()
    (r.stream ? streamed : direct).push_back(r);
  }
  const auto t0 = Clock::now();
  // Streamed experts: copy i+1 into the other staging slot while expert i computes.
  for (size_t i = 0; i < std::min<size_t>(2, streamed.size()); ++i) stage(req.layer, streamed[i], i % 2);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, direct.size(), 1),
                    [&](const tbb::blocked_range<size_t>& rg) {
                      for (size_t i = rg.begin(); i < rg.end(); ++i) {
                        Tracer::Span span(o_.tracer, direct[i].pinned_slot < 0 ? "cpu expert" : "slot expert",
                                          "compute", {{"layer", req.layer}, {"expert", direct[i].expert},
                                                      {"tokens", batch.group_size(direct[i].expert)}});
                        batch.compute_group(direct[i].expert, direct[i].w, y_.data());
                      }
                    });
  for (size_t i = 0; i < streamed.size(); ++i) {
    const size_t b = i % 2;
    const auto tw = Clock::now();
    {
      Tracer::Span span(o_.tracer, "wait staging", "wait", {{"layer", req.layer}, {"expert", streamed[i].expert}});
      staging_done_[b]->synchronize();
    }
    st_.wait_ms += ms_since(tw);
    if (counters_) counters_->wait(WaitCause::copy, static_cast<uint64_t>(ms_since(tw) * 1e6));
    const ExpertPtrs3 w = staging_ptrs(b, req.layer);
    Tracer::Span span(o_.tracer, "staged expert", "compute",
                      {{"layer", req.layer}, {"expert", streamed[i].expert}, {"tokens", batch.group_size(streamed[i].expert)}});
    batch.compute_group(streamed[i].expert, w, y_.data());
    if (i + 2 < streamed.size()) stage(req.layer, streamed[i + 2], b);  // the buffer is free: its compute is done
  }
  weighted_sum(req, y_.data());
  st_.compute_ms += ms_since(t0);
}

void OffloadExecutor::set_counters(StatsCounters* c) {
  counters_ = c;
  prefetcher_->set_counters(c);
}

double OffloadExecutor::measure_device_rate(const ExpertPtrs3& entry) {
  // The copy calibrate_rates left in staging slot 0, read repeatedly (device memory).
  return time_expert_kernels({entry, entry, entry, entry});
}

double OffloadExecutor::measure_mapped_rate() {
  std::vector<ExpertPtrs3> entries;
  for (int32_t e = 0; e < std::min(4, o_.plan.in.n_expert); ++e) entries.push_back(expert_ptrs(mapped_[0], e));
  return entries.size() < 2 ? 0.0 : time_expert_kernels(entries);
}

double OffloadExecutor::time_expert_kernels(const std::vector<ExpertPtrs3>& entries) {
  // The device kernels on experts of layer 0, one token each, timed with events on the compute
  // stream: a warm-up on entries[0] (and any scratch allocation), then one launch per further
  // entry; the best of those.
  const ExpertShape& s = shapes_[0];
  const size_t x_bytes = static_cast<size_t>(s.n_embd) * sizeof(float);
  constexpr size_t kMax = 8;  // entries the layout below holds
  // Layout in the step buffer (sized for max_batch ≥ 1 tokens): table | weight | ids | x | y.
  const size_t off_w = 256, off_id = 512, off_x = 768, off_y = off_x + (x_bytes + 255) / 256 * 256;
  const size_t total = off_y + x_bytes;
  if (entries.empty() || entries.size() > kMax || total > step_dev_.bytes() || total > step_host_.bytes()) return 0.0;
  auto* h = static_cast<uint8_t*>(step_host_.data());
  std::copy(entries.begin(), entries.end(), reinterpret_cast<ExpertPtrs3*>(h));
  *reinterpret_cast<float*>(h + off_w) = 1.0f;
  for (size_t i = 0; i < entries.size(); ++i) reinterpret_cast<int32_t*>(h + off_id)[i] = static_cast<int32_t>(i);
  auto* x = reinterpret_cast<float*>(h + off_x);
  for (int64_t i = 0; i < s.n_embd; ++i) x[i] = static_cast<float>((i * 7919) % 13) / 13.0f - 0.5f;
  compute_->copy_h2d(step_dev_.data(), h, off_y);
  auto* d = static_cast<uint8_t*>(step_dev_.data());
  const auto run = [&](size_t i) {
    kernels_->experts(s, reinterpret_cast<const ExpertPtrs3*>(d), reinterpret_cast<const int32_t*>(d + off_id) + i,
                      reinterpret_cast<const float*>(d + off_w), 1, 1, reinterpret_cast<const float*>(d + off_x),
                      reinterpret_cast<float*>(d + off_y), false, *compute_);
  };
  run(0);
  const auto e0 = device_->create_event(), e1 = device_->create_event();
  double best_ms = 1e30;
  for (size_t i = 1; i < entries.size(); ++i) {
    compute_->record(*e0);
    run(i);
    compute_->record(*e1);
    e1->synchronize();
    best_ms = std::min(best_ms, e1->elapsed_ms_since(*e0));
  }
  return best_ms > 0 && best_ms < 1e30 ? static_cast<double>(s.expert_bytes()) / (best_ms * 1e6) : 0.0;
}

void OffloadExecutor::collect_device_waits() {
  if (pending_cpu_wait_) {  // (both events recorded before the flag was set)
    const double ms = std::max(0.0, cpu_ready_->elapsed_ms_since(*kernels_done_));
    st_.device_wait_ms[static_cast<int>(WaitCause::cpu_expert)] += ms;
    if (counters_) counters_->wait(WaitCause::cpu_expert, static_cast<uint64_t>(ms * 1e6));
    pending_cpu_wait_ = false;
  }
  if (pending_stream_) {
    st_.stream_gpu_ms += std::max(0.0, stream_end_->elapsed_ms_since(*stream_begin_));
    pending_stream_ = false;
  }
}

void OffloadExecutor::drain() {
  read_routing_log();  // the last table step's routing (its admissions are waited for below)
  device_->synchronize();
  prefetcher_->poll();
  if (compute_) collect_device_waits();
}

OffloadStats OffloadExecutor::stats() const {
  OffloadStats s = st_;
  s.prefetch = prefetcher_->counters();
  s.cache = cache_->counters();
  s.memory = device_->memory();
  s.rates = cost_.rates();
  s.store = store_->stats();
  s.n_slots = o_.plan.n_slots;
  return s;
}

void OffloadExecutor::reset_stats() {
  read_routing_log();  // a table step before the reset is not counted after it
  const auto L = st_.layer_uses.size();
  st_ = OffloadStats{};
  st_.device_flow = compute_ != nullptr;
  st_.layer_uses.assign(L, 0);
  st_.layer_hits.assign(L, 0);
  prefetcher_->reset_counters();
  cache_->reset_counters();
  pending_cpu_wait_ = pending_stream_ = false;  // a step before the reset is not counted after it
}

std::string offload_stats_text(const OffloadStats& s) {
  const auto pct = [](uint64_t a, uint64_t b) {
    return b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0;
  };
  std::string t = fmt::format(
      "offload: {} slots, {} steps, {} tokens; expert uses {}: hits {} ({:.1f}%), prefetch in "
      "flight {} (waited {}), "
      "misses {} → cpu {}, copy-now {}, streamed {}, read in place {} ({:.1f} MB)\n",
      s.n_slots, s.steps, s.tokens, s.uses, s.hits, pct(s.hits, s.uses), s.inflight, s.waited,
      s.misses, s.cpu_experts, s.copy_now, s.streamed, s.mapped, static_cast<double>(s.mapped_bytes) / 1e6);
  t += fmt::format(
      "offload: prefetch issued {} used {} ({:.1f}% precision) wasted {} stale {} no-slot {}; "
      "admitted {} (dropped {})\n",
      s.prefetch.issued, s.prefetch.used, pct(s.prefetch.used, s.prefetch.issued),
      s.prefetch.wasted, s.prefetch.dropped_stale, s.prefetch.dropped_no_slot, s.prefetch.admitted,
      s.prefetch.admit_dropped);
  const double tok = static_cast<double>(std::max<uint64_t>(s.tokens, 1));
  t += fmt::format(
      "offload: H2D {:.2f} MB/token (demand+stream {:.1f} MB, prefetch+admit {:.1f} MB, initial "
      "{:.1f} MB), host waited "
      "{:.2f} ms/token on copies, compute {:.2f} ms/token\n",
      static_cast<double>(s.h2d_bytes + s.prefetch.bytes) / 1e6 / tok,
      static_cast<double>(s.h2d_bytes) / 1e6, static_cast<double>(s.prefetch.bytes) / 1e6,
      static_cast<double>(s.init_bytes) / 1e6, s.wait_ms / tok, s.compute_ms / tok);
  t += fmt::format(
      "offload: device memory peak {:.1f} MiB of {:.1f} MiB budget; rates ({}): h2d {:.1f} GB/s, "
      "cpu {:.1f} GB/s, device {:.1f} GB/s, in place {:.1f} GB/s\n",
      static_cast<double>(s.memory.peak_bytes) / 1048576.0,
      s.memory.budget_bytes == UINT64_MAX ? 0.0
                                          : static_cast<double>(s.memory.budget_bytes) / 1048576.0,
      s.rates.source, s.rates.h2d_gbps, s.rates.cpu_gbps, s.rates.device_gbps, s.rates.mapped_gbps);
  if (s.device_flow) {
    t += fmt::format(
        "offload: device idle {:.3f} ms/token waiting for copies, {:.3f} for CPU experts, {:.3f} for the host "
        "(sync + decisions)",
        s.wait_ms / tok, s.device_wait_ms[static_cast<int>(WaitCause::cpu_expert)] / tok,
        s.device_wait_ms[static_cast<int>(WaitCause::sync)] / tok);
    if (s.stream_bytes)
      t += fmt::format("; prefill streaming {:.1f} MB in {:.1f} ms of device time, its kernels included ({:.2f} GB/s)",
                       static_cast<double>(s.stream_bytes) / 1e6, s.stream_gpu_ms,
                       s.stream_gpu_ms > 0 ? static_cast<double>(s.stream_bytes) / (s.stream_gpu_ms * 1e6) : 0.0);
    t += "\n";
  }
  if (s.table_tokens)
    t += fmt::format("offload: {} decode tokens from the device tables (no host sync), {} table entries rewritten\n",
                     s.table_tokens, s.table_updates);
  t += fmt::format("offload: host store {} ({}{}), {:.1f} MB", host_load_name(s.store.mode),
                   s.store.pinned ? "pinned" : "pageable", s.store.direct_io ? ", O_DIRECT" : "",
                   static_cast<double>(s.store.bytes) / 1e6);
  if (s.store.load_gbps > 0)
    t += fmt::format(" loaded in {:.0f} ms ({:.2f} GB/s)", s.store.load_ms, s.store.load_gbps);
  t += "\noffload: hit rate per layer:";
  for (size_t l = 0; l < s.layer_uses.size(); ++l)
    t += fmt::format(" {:.0f}%", pct(s.layer_hits[l], s.layer_uses[l]));
  t += "\n";
  return t;
}

// ---- Decode from device tables ---------------------------------------------------------------

uint64_t decode_table_bytes(int32_t n_layer, int32_t n_expert, int32_t top_k) {
  const auto L = static_cast<size_t>(n_layer);
  return pad256(L * static_cast<size_t>(n_expert) * sizeof(ExpertPtrs3)) +
         pad256(L * static_cast<size_t>(top_k) * 4);
}

void OffloadExecutor::run_table(const MoeRequest& req) {
  if (!tables_synced_)
    fail(ErrorKind::internal, "offload: a decode step from the device tables without before_step(1)");
  if (req.top_k != o_.plan.in.n_expert_used)
    fail(ErrorKind::internal, "offload: top-{} step, the tables were made for top-{}", req.top_k,
         o_.plan.in.n_expert_used);
  const auto l = static_cast<size_t>(req.layer);
  const auto E = static_cast<size_t>(o_.plan.in.n_expert), K = static_cast<size_t>(req.top_k);
  const auto* table = static_cast<const ExpertPtrs3*>(tables_dev_.data()) + l * E;
  kernels_->experts(shapes_[l], table, req.expert_ids, req.expert_weights, 1, req.top_k, req.x, req.out,
                    /*accumulate=*/false, *compute_);
  compute_->copy_d2d(static_cast<int32_t*>(log_dev_.data()) + l * K, req.expert_ids, K * 4);
  logged_[l] = 1;
}

void OffloadExecutor::before_step(int64_t n_tokens) {
  if (!o_.decode_table) return;
  read_routing_log();
  prefetcher_->poll();
  if (n_tokens == 1) sync_tables();
}

void OffloadExecutor::after_step(int64_t n_tokens) {
  if (!o_.decode_table || n_tokens != 1 || std::find(logged_.begin(), logged_.end(), 1) == logged_.end()) return;
  compute_->copy_d2h(log_host_.data(), log_dev_.data(), log_host_.bytes());
  compute_->record(*log_ready_);
  // Slot refills (admissions, prefetches, copy-now) wait for this: every table kernel queued so
  // far may read any slot its table points at.
  compute_->record(*compute_done_);
  log_pending_ = true;
}

void OffloadExecutor::read_routing_log() {
  if (!log_pending_) return;
  // Normally passed already: the forward read the step's logits after the log was copied.
  log_ready_->synchronize();
  log_pending_ = false;
  ++tick_;
  ++st_.tokens;
  ++st_.table_tokens;
  const int32_t E = o_.plan.in.n_expert, K = o_.plan.in.n_expert_used;
  const auto* ids = static_cast<const int32_t*>(log_host_.data());
  // Counted against the slots the step's tables pointed at (the cache has not changed since
  // sync_tables), all before any admission evicts one.
  std::vector<std::pair<int32_t, int32_t>> admit;
  for (int32_t l = 0; l < static_cast<int32_t>(logged_.size()); ++l) {
    if (!logged_[static_cast<size_t>(l)]) continue;
    logged_[static_cast<size_t>(l)] = 0;
    ++st_.steps;
    if (o_.record) o_.record->add(l, ids + l * K, 1, K);
    for (int32_t j = 0; j < K; ++j) {
      const int32_t e = ids[l * K + j];
      if (e < 0 || e >= E) fail(ErrorKind::internal, "offload: routing log layer {}: expert id {} outside [0, {})", l, e, E);
      ++st_.uses;
      ++st_.layer_uses[static_cast<size_t>(l)];
      const int32_t slot = cache_->access(l, e, tick_);
      if (slot >= 0 && cache_->state(slot) == SlotState::ready) {
        ++st_.hits;
        ++st_.layer_hits[static_cast<size_t>(l)];
        prefetcher_->note_use(slot);
        if (counters_) counters_->hit(l);
        continue;
      }
      ++st_.misses;
      ++st_.mapped;
      st_.mapped_bytes += shapes_[static_cast<size_t>(l)].expert_bytes();
      if (counters_) counters_->miss(l);
      if (slot < 0 && o_.admit) admit.emplace_back(l, e);
    }
  }
  for (const auto& [l, e] : admit) prefetcher_->admit(l, e, tick_);
}

void OffloadExecutor::sync_tables() {
  // The pinned mirror is rewritten below: its last copy must have run (it normally has).
  if (tables_pending_) {
    tables_copied_->synchronize();
    tables_pending_ = false;
  }
  // Nothing to rewrite while the cache's content is what the tables were last synced with.
  if (tables_version_ == cache_->version()) {
    tables_synced_ = true;
    return;
  }
  tables_version_ = cache_->version();
  const auto E = static_cast<size_t>(o_.plan.in.n_expert);
  tables_want_ = tables_mapped_;
  for (int32_t s = 0; s < cache_->n_slots(); ++s)
    if (cache_->state(s) == SlotState::ready) {
      const int32_t l = cache_->layer_of(s);
      tables_want_[static_cast<size_t>(l) * E + static_cast<size_t>(cache_->expert_of(s))] = slot_ptrs(s, l);
    }
  auto* host = static_cast<ExpertPtrs3*>(tables_host_.data());
  // Changed layers, runs of consecutive ones copied at once. Slots a refill is about to overwrite
  // are no longer ready, so their entries point at host memory again before any later kernel; the
  // refill itself waits for compute_done_ (after_step), i.e. for every kernel queued before this.
  const size_t L = layers_.size();
  size_t run_begin = L;
  const auto flush = [&](size_t end) {
    if (run_begin == L) return;
    compute_->copy_h2d(static_cast<ExpertPtrs3*>(tables_dev_.data()) + run_begin * E, host + run_begin * E,
                       (end - run_begin) * E * sizeof(ExpertPtrs3));
    tables_pending_ = true;
    run_begin = L;
  };
  for (size_t l = 0; l < L; ++l) {
    size_t changed = 0;
    for (size_t e = l * E; e < (l + 1) * E; ++e)
      if (host[e] != tables_want_[e]) {
        host[e] = tables_want_[e];
        ++changed;
      }
    st_.table_updates += changed;
    if (changed && run_begin == L) run_begin = l;
    if (!changed) flush(l);
  }
  flush(L);
  if (tables_pending_) compute_->record(*tables_copied_);
  tables_synced_ = true;
}

}  // namespace ferry
