#include "offload/prefetcher.hpp"

#include <algorithm>
#include <chrono>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Prefetcher::Prefetcher(Device& dev, ExpertCache& cache, SlotCopy copy,
                       std::vector<uint64_t> layer_expert_bytes, int32_t max_in_flight)
    : dev_(dev),
      cache_(cache),
      copy_(std::move(copy)),
      layer_expert_bytes_(std::move(layer_expert_bytes)),
      max_in_flight_(std::max(1, max_in_flight)),
      stream_(dev.create_stream()) {
  own_counters_ = std::make_unique<StatsCounters>(static_cast<int32_t>(layer_expert_bytes_.size()));
  counters_ = own_counters_.get();
  slots_.resize(static_cast<size_t>(cache.n_slots()));
  for (auto& s : slots_) s.done = dev.create_event();
}

void Prefetcher::request(const PredictedExpert& p) {
  counters_->add(Count::prefetch_requested);
  queue_.push_back(p);
}

void Prefetcher::issue(int32_t current_layer, uint64_t now) {
  poll();
  // Best first; stable so that equal scores keep the predictor's order.
  std::stable_sort(
      queue_.begin(), queue_.end(),
      [](const PredictedExpert& a, const PredictedExpert& b) { return a.score > b.score; });
  std::vector<PredictedExpert> keep;
  for (const PredictedExpert& p : queue_) {
    if (p.layer <= current_layer) {
      counters_->add(Count::prefetch_dropped_stale);
      continue;
    }
    if (cache_.find(p.layer, p.expert) >= 0) continue;  // present or already coming
    if (static_cast<int32_t>(in_flight_slots_.size()) >= max_in_flight_) {
      keep.push_back(p);
      continue;
    }
    const int32_t slot = cache_.insert(p.layer, p.expert, now);
    if (slot < 0) {
      counters_->add(Count::prefetch_dropped_no_slot);
      continue;
    }
    note_evict(slot);  // its previous content, if that was an unused prefetch
    Slot& s = slots_[static_cast<size_t>(slot)];
    cache_.pin(slot);  // no eviction while the copy is in flight
    copy_(slot, p.layer, p.expert, *stream_);
    stream_->record(*s.done);
    s.in_flight = true;
    s.unused = true;
    s.layer = p.layer;
    s.issued_at_us = now_us();
    track(slot);
    counters_->prefetch_issued(p.layer, expert_bytes(p.layer));
    counters_->add(Count::prefetch_bytes, expert_bytes(p.layer));
    counters_->h2d(p.layer, expert_bytes(p.layer));
  }
  queue_ = std::move(keep);
}

void Prefetcher::admit(int32_t layer, int32_t expert, uint64_t now) {
  if (cache_.find(layer, expert) >= 0) return;
  if (static_cast<int32_t>(in_flight_slots_.size()) >= max_in_flight_) {
    counters_->add(Count::admit_dropped);
    return;
  }
  const int32_t slot = cache_.insert(layer, expert, now);
  if (slot < 0) {
    counters_->add(Count::admit_dropped);
    return;
  }
  note_evict(slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  cache_.pin(slot);
  copy_(slot, layer, expert, *stream_);
  stream_->record(*s.done);
  s.in_flight = true;
  s.unused = false;
  s.layer = layer;
  s.issued_at_us = now_us();
  track(slot);
  counters_->add(Count::admitted);
  counters_->add(Count::prefetch_bytes, expert_bytes(layer));
  counters_->h2d(layer, expert_bytes(layer));
}

void Prefetcher::track(int32_t slot) {
  in_flight_slots_.insert(
      std::lower_bound(in_flight_slots_.begin(), in_flight_slots_.end(), slot), slot);
}

void Prefetcher::settle(int32_t slot) {
  slots_[static_cast<size_t>(slot)].in_flight = false;
  cache_.mark_ready(slot);
  cache_.unpin(slot);
}

void Prefetcher::complete(int32_t slot) {
  settle(slot);
  const auto it = std::lower_bound(in_flight_slots_.begin(), in_flight_slots_.end(), slot);
  if (it == in_flight_slots_.end() || *it != slot)
    fail(ErrorKind::internal, "prefetcher: slot {} completed without a copy in flight", slot);
  in_flight_slots_.erase(it);
}

void Prefetcher::poll() {
  // In place: the slots still in flight move down over the ones that landed.
  size_t kept = 0;
  for (const int32_t slot : in_flight_slots_) {
    if (slots_[static_cast<size_t>(slot)].done->query())
      settle(slot);
    else
      in_flight_slots_[kept++] = slot;
  }
  in_flight_slots_.resize(kept);
}

void Prefetcher::wait(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (!s.in_flight) return;
  const auto t0 = std::chrono::steady_clock::now();
  s.done->synchronize();
  if (counters_)
    counters_->wait(WaitCause::copy,
                    static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count()));
  complete(slot);
}

bool Prefetcher::in_flight(int32_t slot) const {
  return slots_[static_cast<size_t>(slot)].in_flight;
}

double Prefetcher::age_us(int32_t slot) const {
  return now_us() - slots_[static_cast<size_t>(slot)].issued_at_us;
}

void Prefetcher::note_use(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.unused) {
    s.unused = false;
    counters_->prefetch_used(s.layer);
  }
}

void Prefetcher::note_evict(int32_t slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.in_flight)
    fail(ErrorKind::internal, "prefetcher: slot {} reused while its copy is in flight", slot);
  if (s.unused) {
    s.unused = false;
    counters_->prefetch_wasted(s.layer, expert_bytes(s.layer));
  }
}

PrefetchCounters prefetch_counters(const StatsSnapshot& c) {
  PrefetchCounters p;
  p.requested = c.count(Count::prefetch_requested);
  p.issued = c.total.prefetch_issued;
  p.used = c.total.prefetch_used;
  p.wasted = c.total.prefetch_wasted;
  p.dropped_stale = c.count(Count::prefetch_dropped_stale);
  p.dropped_no_slot = c.count(Count::prefetch_dropped_no_slot);
  p.admitted = c.count(Count::admitted);
  p.admit_dropped = c.count(Count::admit_dropped);
  p.bytes = c.count(Count::prefetch_bytes);
  return p;
}

}  // namespace ferry
