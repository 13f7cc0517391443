#include "offload/residency.hpp"

#include <algorithm>
#include <chrono>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// An expert packed at `base` (a cache or staging slot): gate, up, down back to back.
ExpertPtrs packed(const uint8_t* base, const ExpertShape& s) {
  return ExpertPtrs{base, base + s.gate_bytes(), base + s.gate_bytes() + s.up_bytes()};
}

}  // namespace

Residency::Residency(Device& dev, std::vector<MoeLayerWeights> layers, const OffloadOptions& o,
                     const Event& compute_done)
    : dev_(dev), o_(o), compute_done_(compute_done), layers_(std::move(layers)) {
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
    if (sh.gate_bytes() % 16 || sh.up_bytes() % 16 || sh.down_bytes() % 16)
      fail(ErrorKind::unsupported,
           "offload: layer {}: expert matrices of {}/{}/{} bytes are not 16-byte multiples", l,
           sh.gate_bytes(), sh.up_bytes(), sh.down_bytes());
    if (sh.gate_type != sh.up_type)
      fail(ErrorKind::unsupported,
           "offload: layer {}: gate ({}) and up ({}) experts of different types", l,
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
  store_ = std::make_unique<HostStore>(&dev_, o_.gguf_path, std::move(regions), o_.host_load,
                                       o_.progress);
  for (int32_t l = 0; l < L; ++l) {
    MoeLayerWeights& w = layers_[static_cast<size_t>(l)];
    w.gate.base = store_->data(static_cast<size_t>(3 * l));
    w.up.base = store_->data(static_cast<size_t>(3 * l + 1));
    w.down.base = store_->data(static_cast<size_t>(3 * l + 2));
  }
  const bool need_mapped = o_.cold == ColdMode::mapped || o_.decode_table;
  if (need_mapped || (o_.cold == ColdMode::auto_ && dev_.kind() == DeviceKind::cuda)) {
    // The same layers as the device sees the host store (expert_ptrs then serves both). On cuda
    // with the cost model (auto), reading in place is one more choice when the store is mapped
    // (the sim device's "kernels" are the CPU's: there it is a forced mode only).
    mapped_ = layers_;
    bool unmapped = false;
    for (MoeLayerWeights& w : mapped_)
      for (ExpertTensor* t : {&w.gate, &w.up, &w.down}) {
        t->base = static_cast<const uint8_t*>(dev_.mapped_view(t->base));
        unmapped = unmapped || !t->base;
        if (!t->base && need_mapped)
          fail(ErrorKind::unsupported,
               "{}: the {} host store is not readable by the device in place (use --host-load "
               "uring, which pins it)",
               o_.decode_table ? "--offload-decode table" : "--cold mapped",
               host_load_name(o_.host_load));
      }
    if (unmapped) mapped_.clear();  // auto: reading in place is simply not a choice
  }

  if (o_.reserve_fixed) {
    const std::pair<uint64_t, const char*> fixed[] = {
        {plan.in.dense_bytes, "dense weights (reserved)"},
        {plan.in.kv_bytes, "KV cache (reserved)"},
        {plan.in.state_bytes, "recurrent state (reserved)"},
        {plan.in.workspace_bytes, "workspace (reserved)"}};
    for (const auto& [bytes, tag] : fixed)
      if (bytes) reserved_.push_back(dev_.alloc(bytes, tag));
  }
  staging_ = dev_.alloc(plan.staging_bytes, "prefill staging slots");
  // One region per size class, each class's slots exactly its experts' size (placement.hpp).
  if (plan.n_slots > 0) slots_ = dev_.alloc(plan.slots_bytes(), "expert slots");
  cache_ = std::make_unique<ExpertCache>(plan.n_slots, L, plan.in.n_expert, o_.policy,
                                         plan.slot_partition());
  prefetcher_ = std::make_unique<Prefetcher>(
      dev_, *cache_,
      [this](int32_t slot, int32_t l, int32_t e, Stream& s) { fill_slot(slot, l, e, s); },
      plan.in.layer_expert_bytes,
      // Table decode admits a whole token's misses at once (before the next step), not one layer
      // at a time: room for one token's worth in flight.
      o_.decode_table ? std::max(o_.prefetch_in_flight, L * plan.in.n_expert_used)
                      : o_.prefetch_in_flight);
  demand_ = dev_.create_stream();
  demand_done_ = dev_.create_event();
  for (auto& e : staging_done_) e = dev_.create_event();
  for (auto& e : staging_free_) e = dev_.create_event();

  // Initial hot set, then one synchronisation.
  for (int32_t l = 0; l < L; ++l)
    for (int32_t e : plan.hot[static_cast<size_t>(l)]) {
      const int32_t slot = cache_->insert(l, e, 0);
      if (slot < 0)
        fail(ErrorKind::internal, "offload: no slot for the initial hot set (layer {} expert {})",
             l, e);
      fill_slot(slot, l, e, *demand_);
      init_bytes_ += shapes_[static_cast<size_t>(l)].expert_bytes();
    }
  demand_->synchronize();
  for (int32_t s = 0; s < cache_->n_slots(); ++s)
    if (cache_->state(s) == SlotState::loading) cache_->mark_ready(s);
  cache_->reset_counters();
}

Residency::~Residency() {
  // Copies may still read the host store or write slots: let every stream drain first.
  try {
    dev_.synchronize();
  } catch (...) {
  }
}

ExpertPtrs Residency::slot_ptrs(int32_t slot, int32_t layer) const {
  return packed(static_cast<const uint8_t*>(slots_.data()) + o_.plan.slot_offset(slot),
                shapes_[static_cast<size_t>(layer)]);
}

ExpertPtrs Residency::staging_ptrs(size_t b, int32_t layer) const {
  return packed(static_cast<const uint8_t*>(staging_.data()) + b * o_.plan.staging_slot_bytes,
                shapes_[static_cast<size_t>(layer)]);
}

int32_t Residency::track_of(const Stream& s) {
  for (size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == &s) return Tracer::kTrackBase + static_cast<int32_t>(i);
  tracks_.push_back(&s);
  const auto id = Tracer::kTrackBase + static_cast<int32_t>(tracks_.size() - 1);
  o_.tracer->set_track_name(id, &s == demand_.get()
                                    ? "copies: demand / staging"
                                    : "copies: prefetch " + std::to_string(tracks_.size() - 1));
  return id;
}

void Residency::traced_copy(Stream& s, int32_t layer, int32_t expert, uint64_t bytes,
                            const std::function<void()>& issue) {
  Tracer* t = o_.tracer;
  if (!t || !t->enabled()) return issue();
  const int32_t track = track_of(s);
  auto t0 = std::make_shared<int64_t>(0);
  s.host_fn([t, t0] { *t0 = t->now_ns(); });
  issue();
  s.host_fn([t, t0, track, layer, expert, bytes] {
    t->complete("h2d", "copy", *t0, t->now_ns() - *t0,
                {{"layer", layer}, {"expert", expert}, {"bytes", static_cast<int64_t>(bytes)}},
                track);
  });
}

void Residency::fill_slot(int32_t slot, int32_t layer, int32_t expert, Stream& s) {
  const ExpertShape& sh = shapes_[static_cast<size_t>(layer)];
  const ExpertPtrs src = host_ptrs(layer, expert), dst = slot_ptrs(slot, layer);
  s.wait(
      compute_done_);  // kernels queued on the compute stream may still read the slot's old expert
  traced_copy(s, layer, expert, sh.expert_bytes(), [&] {
    s.copy_h2d(const_cast<uint8_t*>(dst.gate), src.gate, sh.gate_bytes());
    s.copy_h2d(const_cast<uint8_t*>(dst.up), src.up, sh.up_bytes());
    s.copy_h2d(const_cast<uint8_t*>(dst.down), src.down, sh.down_bytes());
  });
}

Residency::Lookup Residency::look_up(int32_t layer, int32_t expert, uint64_t now) {
  Lookup r;
  r.slot = cache_->access(layer, expert, now);
  if (r.slot < 0) return r;
  if (prefetcher_->in_flight(r.slot)) {
    r.where = Residence::in_flight;
    r.copy_age_us = prefetcher_->age_us(r.slot);
  } else {
    r.where = Residence::ready;
  }
  return r;
}

bool Residency::ready(int32_t layer, int32_t expert) const {
  const int32_t slot = cache_->find(layer, expert);
  return slot >= 0 && cache_->state(slot) == SlotState::ready;
}

ExpertPtrs Residency::pin(int32_t slot, int32_t layer) {
  prefetcher_->note_use(slot);
  cache_->pin(slot);
  return slot_ptrs(slot, layer);
}

int32_t Residency::fill(int32_t layer, int32_t expert, uint64_t now, double& waited_ms) {
  const int32_t slot = cache_->insert(layer, expert, now);
  if (slot < 0) return -1;
  prefetcher_->note_evict(slot);
  cache_->pin(slot);
  waited_ms = fill_now(slot, layer, expert);
  cache_->mark_ready(slot);
  return slot;
}

bool Residency::use_in_place(int32_t layer, int32_t expert, uint64_t now, bool& found_slot) {
  const int32_t slot = cache_->access(layer, expert, now);
  found_slot = slot >= 0;
  if (slot >= 0 && cache_->state(slot) == SlotState::ready) {
    prefetcher_->note_use(slot);
    return true;
  }
  return false;
}

void Residency::prefetch(const std::vector<PredictedExpert>& p, int32_t current_layer, uint64_t now) {
  for (const PredictedExpert& x : p)
    if (x.layer < n_layer() && x.expert >= 0 && x.expert < host_layer(x.layer).n_expert)
      prefetcher_->request(x);  // stale ones (x.layer <= current_layer) are dropped and counted by issue()
  prefetcher_->issue(current_layer, now);
}

double Residency::fill_now(int32_t slot, int32_t layer, int32_t expert) {
  fill_slot(slot, layer, expert, *demand_);
  demand_->record(*demand_done_);
  const auto t0 = std::chrono::steady_clock::now();
  {
    Tracer::Span span(o_.tracer, "wait copy", "wait", {{"layer", layer}, {"expert", expert}});
    demand_done_->synchronize();
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void Residency::stage(int32_t layer, int32_t expert, size_t b) {
  const ExpertShape& sh = shapes_[static_cast<size_t>(layer)];
  const ExpertPtrs src = host_ptrs(layer, expert), dst = staging_ptrs(b, layer);
  demand_->wait(*staging_free_[b]);
  traced_copy(*demand_, layer, expert, sh.expert_bytes(), [&] {
    demand_->copy_h2d(const_cast<uint8_t*>(dst.gate), src.gate, sh.gate_bytes());
    demand_->copy_h2d(const_cast<uint8_t*>(dst.up), src.up, sh.up_bytes());
    demand_->copy_h2d(const_cast<uint8_t*>(dst.down), src.down, sh.down_bytes());
  });
  demand_->record(*staging_done_[b]);
}

}  // namespace ferry
