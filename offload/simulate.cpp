// simulate_ferry: OffloadExecutor::run_host_routed's order of work (resolve present experts,
// predict and prefetch, resolve the misses, launch, CPU experts meanwhile, sum) with the engine's
// own cache, decide(), cost model, prefetcher and predictor, timed on three virtual resources: the
// host thread (the clock), the GPU compute stream and the host→device link.
#include "offload/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "runtime/moe/predictor.hpp"
#include "offload/simulate_device.hpp"
#include "offload/simulate_routing.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

constexpr int32_t kTrackHost = Tracer::kTrackBase, kTrackGpu = Tracer::kTrackBase + 1,
                  kTrackLink = Tracer::kTrackBase + 2, kTrackCpu = Tracer::kTrackBase + 3;

// Host calls of a host-routed step besides the layer's kernels, counted in the engine's code; each
// costs the host a launch (model revision 3 counts all of them, revision 2 only the first and a
// part of the CPU experts'):
// - the routing's three device-to-host copies (OffloadExecutor::host_routing);
// - the wait for the previous step's compute_done_ (DeviceStep::run) and its record at the step's
//   end (run_host_routed's Unpin);
// - a step not decoded by value (a batch, or one with streamed experts) uploads its table;
// - CPU experts: the events around their work (kernels_done_, cpu_ready_), the rows' scatter, the
//   next step's read of the two events' elapsed time (DeviceStep::collect_waits); a batch also
//   uploads the rows' indices;
// - streamed experts: the events around them and the next step's read of their elapsed time; per
//   expert, besides its copy (kFillOps), the compute stream's wait for it, its kernel and the
//   staging slot's release.
constexpr double kRoutingCopies = 3, kStepEventOps = 2, kTableUpload = 1;
constexpr double kCpuEventOps = 4, kCpuIndexUpload = 1;
constexpr double kStreamStepOps = 3, kStreamExpertOps = 3;
// Top-k up to this is decoded by value (kernels/moe_table.hpp DecodeSlots::kMaxSlots).
constexpr int32_t kMaxDecodeSlots = 16;
// Kernels of one MoE step on the GPU: gate/up with SwiGLU, down, the weighted sum
// (kernels/cuda/moe.cu: moe_gate_up_swiglu, moe_down_slots, moe_sum); the rest of a layer's
// launches are its dense part's. The lm head: its norm and its matmul.
constexpr double kMoeKernels = 3, kHeadKernels = 2;
// Host calls of one expert's copy into a slot or a staging slot: a wait on the compute stream's
// event, the gate, up and down copies, an event record (Residency::fill_slot, ::stage, and the
// prefetcher's or fill_now's record).
constexpr double kFillOps = 5;

int64_t ns(double us) { return static_cast<int64_t>(std::llround(us * 1e3)); }

// A host synchronisation returns this long after the work it waits for has ended: the measured
// launch + synchronise round trip less its launch.
double sync_return_us(const SimRates& r) { return std::max(0.0, r.sync_us - r.launch_us); }

// GPU time of weights read once for n tokens: one token streams them at the kernels' rates; a
// batch is bounded by the prefill FLOP rate (2 FLOPs per weight and token) as well.
double gpu_us(const SimRates& r, const std::vector<TypedBytes>& w, int64_t n) {
  double read = 0, elements = 0;
  for (const TypedBytes& t : w) {
    read += r.kernel_us(t.type, t.bytes);
    elements += static_cast<double>(t.elements);
  }
  if (n <= 1) return read;
  return std::max(read, 2.0 * elements * double(n) / (r.prefill_gflops * 1e3));
}

std::vector<TypedBytes> expert_weights(const ExpertShape& s) {
  const auto el = static_cast<uint64_t>(s.n_embd) * static_cast<uint64_t>(s.n_ff);
  return {{s.gate_type, s.gate_bytes(), el}, {s.up_type, s.up_bytes(), el},
          {s.down_type, s.down_bytes(), el}};
}

struct Resolved {
  int32_t expert = -1;
  int32_t pinned_slot = -1;
  bool cpu = false;
  bool streamed = false;
  double ready_us = 0;  // its weights are on the device from then (streamed experts)
  int64_t n_tokens = 0;
};

class Run {
 public:
  Run(const SimModel& m, const SimRates& r, const SimOptions& o)
      : m_(m), r_(r), o_(o), dev_(clock_), plan_(sim_plan(m, o.budget_bytes)),
        router_(o.routing, m.n_layer, m.n_expert, m.top_k),
        tracer_(o.trace_path.empty() ? std::make_unique<Tracer>() : std::make_unique<Tracer>(o.trace_path)) {
    const SimLayer& l0 = m.layers.at(0);
    // Durations come from the hardware's rates; decisions from what a run's start-up calibration
    // of layer 0's expert 0 would measure on it (model revision 6, docs/simulator.md).
    time_ = CostModel(r.cost_rates(l0.expert.gate_type, l0.expert.up_type, l0.expert.down_type));
    cost_ = CostModel(r.calibrated_rates(l0.expert.gate_type, l0.expert.up_type,
                                         l0.expert.down_type, l0.expert.expert_bytes()));
    resident_ = plan_.n_slots >= plan_.total_experts();
    cache_ = std::make_unique<ExpertCache>(plan_.n_slots, m.n_layer, m.n_expert, o.policy,
                                           plan_.slot_partition());
    prefetcher_ = std::make_unique<Prefetcher>(
        dev_, *cache_,
        [this](int32_t slot, int32_t layer, int32_t, Stream& s) { book_prefetch(slot, layer, s); },
        plan_.in.layer_expert_bytes, o.prefetch_in_flight);
    slot_ready_.assign(static_cast<size_t>(plan_.n_slots), 0.0);
    for (int32_t l = 0; l < m.n_layer; ++l)
      for (int32_t e : plan_.hot[static_cast<size_t>(l)]) {
        const int32_t slot = cache_->insert(l, e, 0);
        if (slot < 0) fail(ErrorKind::internal, "simulator: no slot for the hot set");
        cache_->mark_ready(slot);
      }
    cache_->reset_counters();
    if (o.prefetch > 0) {
      PredictorOptions po;
      po.depth = o.prefetch;
      predictor_ = std::make_unique<RouterPredictor>(std::vector<WeightView>{}, m.n_layer,
                                                     m.n_expert, m.top_k, po);
    }
    tracer_->set_track_name(kTrackHost, "host (virtual time)");
    tracer_->set_track_name(kTrackGpu, "GPU compute");
    tracer_->set_track_name(kTrackLink, "H2D link");
    tracer_->set_track_name(kTrackCpu, "CPU experts");
    res_.strategy = SimStrategy::ferry;
    res_.n_slots = plan_.n_slots;
    res_.experts_on_gpu_fraction = plan_.resident_fraction();
    if (o.cold == ColdMode::auto_ && r.measured_decode_cold && !resident_)
      res_.note = fmt::format("decode misses: {}, as the engine decided when measured on {}",
                              name_of(kColdModes, *r.measured_decode_cold), r.host);
  }

  SimResult run() {
    if (const RoutingTrace* t = router_.trace(); t && !t->records.empty()) {
      replay_steps(*t);
    } else {
      for (int64_t done = 0; done < o_.n_prompt; done += o_.n_batch)
        step(std::min<int64_t>(o_.n_batch, o_.n_prompt - done));
      for (int64_t i = 0; i < o_.n_decode; ++i) step(1);
    }
    finish();
    return res_;
  }

 private:
  double& now() { return clock_.now_us; }

  // A trace's records give the steps of the recorded run: a step ends where the layer number
  // stops increasing.
  void replay_steps(const RoutingTrace& t) {
    int32_t last = -1;
    for (const auto& [layer, n] : t.records) {
      if (layer <= last) last = -1;
      if (last == -1) step_sizes_.push_back(n);
      last = layer;
    }
    for (int64_t n : step_sizes_) step(n);
  }

  void span(int32_t track, const char* name, const char* cat, double t0, double t1,
            std::initializer_list<TraceArg> args = {}) {
    if (tracer_->enabled() && t1 > t0) tracer_->complete(name, cat, ns(t0), ns(t1 - t0), args, track);
  }

  // Work on the compute stream, enqueued at `enqueue_at` (default: the host's now) and not started
  // before `not_before`; an idle gap before it goes to `cause`.
  void gpu(double us, WaitCause cause, const char* name, int32_t layer, double not_before = 0,
           double enqueue_at = -1) {
    const double start = std::max({gpu_free_, enqueue_at < 0 ? now() : enqueue_at, not_before});
    if (start > gpu_free_ && gpu_free_ > 0 && decoding_)
      tok_.gpu_wait_us[static_cast<size_t>(cause)] += start - gpu_free_;
    gpu_free_ = start + us;
    span(kTrackGpu, name, "gpu", start, gpu_free_, {{"layer", layer}});
  }

  double link_copy(uint64_t bytes, int32_t layer, const char* name) {
    const double start = std::max(link_free_, now());
    link_free_ = start + time_.copy_us(bytes);
    if (decoding_) tok_.link_us += link_free_ - start;
    span(kTrackLink, name, "h2d", start, link_free_, {{"layer", layer}});
    return link_free_;
  }

  void book_prefetch(int32_t slot, int32_t layer, Stream& s) {
    const uint64_t bytes = plan_.in.layer_expert_bytes[static_cast<size_t>(layer)];
    victim_scan(layer);  // the prefetcher's or the admission's insert, just made
    launches(kFillOps);
    const double end = link_copy(bytes, layer, "prefetch");
    if (decoding_) decode_prefetch_bytes_ += bytes;
    slot_ready_[static_cast<size_t>(slot)] = end;
    auto* v = dynamic_cast<VirtualStream*>(&s);
    if (!v) fail(ErrorKind::internal, "simulator: prefetch on a foreign stream");
    v->queue_until(end);
  }

  void launches(double n) {
    const double t0 = now();
    now() += n * r_.launch_us;
    if (decoding_) tok_.launch_us += now() - t0;
  }

  // An insert into the cache costs the host its victim choice (model revision 8): ExpertCache::
  // insert scans every slot of the layer's size class (LRFU computes each one's decayed score),
  // and every slot is taken from the start (the initial hot set fills them), so each insert scans
  // them all. Charged per insert made: copy-now, prefetch, admission.
  void victim_scan(int32_t layer) {
    const auto [begin, end] = cache_->slots_of_layer(layer);
    const double ns = o_.policy == EvictionPolicy::lru ? r_.scan_lru_ns_per_slot : r_.scan_lrfu_ns_per_slot;
    const double us = double(end - begin) * ns / 1e3;
    now() += us;
    if (decoding_) tok_.cache_scan_us += us;
  }

  void step(int64_t n) {
    ++tick_;
    decoding_ = n == 1;
    const double t0 = now();
    res_.tokens += static_cast<uint64_t>(n);
    ids_.resize(static_cast<size_t>(n * m_.top_k));
    for (int32_t l = 0; l < m_.n_layer; ++l) {
      const SimLayer& L = m_.layers[static_cast<size_t>(l)];
      // The host launches the layer's kernels one by one; the GPU starts on the first as soon as
      // it is launched, and no kernel takes less than the shortest one measured.
      const double layer_t0 = now();
      launches(r_.launches_per_layer);
      layer_enqueue_ = layer_t0 + r_.launch_us;
      // A decoded token's attention is its own kernel, timed from its measured decode rows (model
      // revision 9); a batch's reads K and V with the dense work.
      const bool attn_kernel = decoding_ && L.attention;
      const double dense =
          std::max(gpu_us(r_, L.dense, n) + (attn_kernel ? 0.0 : attention_us(L, n)),
                   (r_.launches_per_layer - kMoeKernels - (attn_kernel ? 1.0 : 0.0)) * r_.kernel_floor_us) +
          (attn_kernel ? attention_decode_us() : 0.0);
      if (decoding_) tok_.gpu_dense_us += dense;
      gpu(dense, WaitCause::sync, "dense", l, 0, layer_enqueue_);
      for (int64_t t = 0; t < n; ++t) router_.next(l, ids_.data() + t * m_.top_k);
      moe_step(l, n);
    }
    const double head = std::max(gpu_us(r_, m_.head, n), kHeadKernels * r_.kernel_floor_us);
    if (decoding_) tok_.gpu_dense_us += head;
    gpu(head, WaitCause::sync, "lm head", -1);
    now() = std::max(now(), gpu_free_) + r_.sync_us;  // the logits to the host
    span(kTrackHost, n == 1 ? "decode token" : "prefill step", "step", t0, now(), {{"tokens", n}});
    if (decoding_) {
      ++res_.decode_tokens;
      tok_.total_us += now() - t0;
    } else {
      res_.prefill_us += now() - t0;
      prefill_tokens_ += n;
    }
    pos_ += n;
  }

  // Attention reads the layer's K and V of every position so far.
  double attention_us(const SimLayer& L, int64_t n) const {
    if (!L.attention || m_.kv_bytes_per_position == 0) return 0.0;
    const double per_layer = double(m_.kv_bytes_per_position) / double(attention_layers());
    return per_layer * double(pos_ + n) / (r_.mem_gbps * 1e3);
  }
  // One token's attention kernel: a fixed time plus K and V of every position so far at the
  // measured share of the memory rate, never under the shortest kernel.
  double attention_decode_us() const {
    const double per_layer = double(m_.kv_bytes_per_position) / double(attention_layers());
    return std::max(r_.kernel_floor_us, r_.attention_fixed_us + per_layer * double(pos_ + 1) /
                                                                   (r_.mem_gbps * r_.attention_mem_fraction * 1e3));
  }
  int32_t attention_layers() const {
    int32_t a = 0;
    for (const SimLayer& L : m_.layers) a += L.attention ? 1 : 0;
    return std::max(a, 1);
  }

  void moe_step(int32_t layer, int64_t n) {
    const SimLayer& L = m_.layers[static_cast<size_t>(layer)];
    const auto E = static_cast<size_t>(m_.n_expert);
    std::vector<int64_t> count(E, 0);
    for (int64_t t = 0; t < n * m_.top_k; ++t) ++count[static_cast<size_t>(ids_[static_cast<size_t>(t)])];
    if (resident_) {
      // The resident executor: no routing to the host, every expert in VRAM.
      double us = 0;
      for (size_t e = 0; e < E; ++e)
        if (count[e]) {
          us += gpu_us(r_, expert_weights(L.expert), count[e]);
          ++res_.hits;
          if (decoding_) ++res_.decode_hits, ++res_.decode_uses;
        }
      us = std::max(us, kMoeKernels * r_.kernel_floor_us);
      if (decoding_) tok_.gpu_expert_us += us;
      gpu(us, WaitCause::sync, "experts", layer, 0, layer_enqueue_);
      return;
    }
    // Host-routed: the step's x, ids and weights are copied to the host (three enqueued copies,
    // then one synchronisation: OffloadExecutor::host_routing), behind the layer's dense work.
    launches(kRoutingCopies);
    now() = std::max(now(), gpu_free_) + r_.sync_us;
    prefetcher_->poll();
    const bool decode = n == 1;
    std::vector<Resolved> used;
    std::vector<int32_t> missing;
    for (size_t e = 0; e < E; ++e) {
      if (!count[e]) continue;
      const int32_t slot = cache_->find(layer, static_cast<int32_t>(e));
      if (decode && !(slot >= 0 && cache_->state(slot) == SlotState::ready)) {
        missing.push_back(static_cast<int32_t>(e));
        continue;
      }
      used.push_back(resolve(layer, static_cast<int32_t>(e), count[e], decode));
    }
    if (predictor_) {
      predicted_.clear();
      predictor_->predict(layer, nullptr, static_cast<int32_t>(n), ids_.data(), m_.top_k, predicted_);
      for (const PredictedExpert& p : predicted_)
        if (p.layer < m_.n_layer && p.expert >= 0 && p.expert < m_.n_expert) prefetcher_->request(p);
      prefetcher_->issue(layer, tick_);
    }
    for (int32_t e : missing) used.push_back(resolve(layer, e, 1, true));
    // The step's device work: slot and streamed experts in one grouped launch.
    double gpu_work = 0, streams_ready = 0, cpu_work = 0;
    bool any_cpu = false, any_stream = false;
    for (const Resolved& x : used) any_stream = any_stream || x.streamed;
    const bool by_value = decode && m_.top_k <= kMaxDecodeSlots && !any_stream;
    launches(kStepEventOps / 2 + (by_value ? 0 : kTableUpload) + (any_stream ? kStreamStepOps : 0));
    for (const Resolved& x : used) {
      if (x.cpu) {
        cpu_work += time_.cpu_us(L.expert.expert_bytes(), x.n_tokens) - time_.rates().cpu_handoff_us;
        any_cpu = true;
      } else {
        gpu_work += gpu_us(r_, expert_weights(L.expert), x.n_tokens);
        streams_ready = std::max(streams_ready, x.ready_us);
      }
    }
    gpu_work = std::max(gpu_work, kMoeKernels * r_.kernel_floor_us);
    if (decoding_) tok_.gpu_expert_us += gpu_work;
    gpu(gpu_work, WaitCause::sync, "experts", layer, streams_ready);
    if (any_cpu) {
      // CPU experts on the host's threads meanwhile; their rows go up, then the sum.
      const double c0 = now();
      now() += cpu_work + time_.rates().cpu_handoff_us;
      launches(kCpuEventOps + (decode ? 0 : kCpuIndexUpload));
      if (decoding_) tok_.cpu_expert_us += now() - c0;
      span(kTrackCpu, "cpu experts", "cpu", c0, now(), {{"layer", layer}});
      gpu(0.0, WaitCause::cpu_expert, "sum", layer);
    }
    launches(kStepEventOps / 2);  // compute_done_ recorded
    for (const Resolved& x : used)
      if (x.pinned_slot >= 0) cache_->unpin(x.pinned_slot);
  }

  Resolved resolve(int32_t layer, int32_t expert, int64_t n_tokens, bool decode) {
    Resolved r;
    r.expert = expert;
    r.n_tokens = n_tokens;
    const uint64_t bytes = plan_.in.layer_expert_bytes[static_cast<size_t>(layer)];
    int32_t slot = cache_->access(layer, expert, tick_);
    ExpertState st{slot < 0                        ? Residence::absent
                   : prefetcher_->in_flight(slot) ? Residence::in_flight
                                                  : Residence::ready,
                   bytes, 0.0};
    if (st.where == Residence::in_flight)
      st.copy_remaining_us = std::max(0.0, slot_ready_[static_cast<size_t>(slot)] - now());
    // A decode miss on a host where the engine's decision was measured follows it (model
    // revision 12); an explicit --cold overrides, as it does the engine's calibration.
    const ColdMode cold = o_.cold == ColdMode::auto_ && decode && r_.measured_decode_cold
                              ? *r_.measured_decode_cold
                              : o_.cold;
    const Decision d = decide(st, cost_, DecideContext{cold, n_tokens, decode, false});
    const bool hit = st.where == Residence::ready;
    hit ? ++res_.hits : ++res_.misses;
    if (st.where == Residence::in_flight) ++res_.inflight;
    if (decoding_) {
      ++res_.decode_uses;
      if (hit) ++res_.decode_hits;
    }
    const bool admit_behind = decode && o_.admit && st.where == Residence::absent;
    switch (d) {
      case Decision::mapped:  // never chosen: no mapped rate (SimRates::cost_rates)
        fail(ErrorKind::internal, "simulator: a mapped read was chosen");
      case Decision::stream:
        ++res_.streamed;
        count_demand(bytes);
        launches(kFillOps + kStreamExpertOps);
        r.streamed = true;
        r.ready_us = link_copy(bytes, layer, "stream");
        return r;
      case Decision::wait: {
        const double t0 = now();
        prefetcher_->wait(slot);
        now() += sync_return_us(r_);
        if (decoding_) tok_.gpu_wait_us[static_cast<size_t>(WaitCause::copy)] += now() - t0;
        span(kTrackHost, "wait prefetch", "wait", t0, now(), {{"layer", layer}, {"expert", expert}});
        ++res_.waited;
        [[fallthrough]];
      }
      case Decision::slot:
        prefetcher_->note_use(slot);
        cache_->pin(slot);
        r.pinned_slot = slot;
        return r;
      case Decision::copy_now:
        if ((slot = cache_->insert(layer, expert, tick_)) >= 0) {
          victim_scan(layer);
          prefetcher_->note_evict(slot);
          cache_->pin(slot);
          launches(kFillOps);
          const double t0 = now();
          now() = link_copy(bytes, layer, "copy now") + sync_return_us(r_);  // the host waits for it
          if (decoding_) tok_.gpu_wait_us[static_cast<size_t>(WaitCause::copy)] += now() - t0;
          cache_->mark_ready(slot);
          ++res_.copy_now;
          count_demand(bytes);
          r.pinned_slot = slot;
          return r;
        }
        break;
      case Decision::cpu:
        if (admit_behind) prefetcher_->admit(layer, expert, tick_);
        break;
    }
    ++res_.cpu_experts;
    r.cpu = true;
    return r;
  }

  void count_demand(uint64_t bytes) {
    res_.h2d_demand_bytes += bytes;
    if (decoding_) res_.decode_h2d_bytes += bytes;
  }

  void finish() {
    // Copies still in flight land (as drain()); their bytes were counted when issued.
    if (link_free_ > now()) now() = link_free_;
    prefetcher_->poll();
    res_.prefetch = prefetch_counters(prefetcher_->counters().snapshot());
    res_.h2d_prefetch_bytes = res_.prefetch.bytes;
    const double n = static_cast<double>(std::max<uint64_t>(res_.decode_tokens, 1));
    res_.token.total_us = tok_.total_us / n;
    res_.token.gpu_dense_us = tok_.gpu_dense_us / n;
    res_.token.gpu_expert_us = tok_.gpu_expert_us / n;
    res_.token.launch_us = tok_.launch_us / n;
    res_.token.cache_scan_us = tok_.cache_scan_us / n;
    res_.token.cpu_expert_us = tok_.cpu_expert_us / n;
    res_.token.link_us = tok_.link_us / n;
    for (size_t i = 0; i < res_.token.gpu_wait_us.size(); ++i)
      res_.token.gpu_wait_us[i] = tok_.gpu_wait_us[i] / n;
    res_.tg_tps = res_.token.total_us > 0 && res_.decode_tokens ? 1e6 / res_.token.total_us : 0.0;
    res_.pp_tps = res_.prefill_us > 0 ? double(prefill_tokens_) / (res_.prefill_us / 1e6) : 0.0;
    // Prefetched bytes during decode: the per-token H2D figure counts them as --stats does.
    res_.decode_h2d_bytes += decode_prefetch_bytes();
    if (tracer_->enabled()) tracer_->write();
  }

  uint64_t decode_prefetch_bytes() const { return decode_prefetch_bytes_; }

  const SimModel& m_;
  const SimRates& r_;
  const SimOptions& o_;
  VirtualClock clock_;
  VirtualDevice dev_;
  Plan plan_;
  SimRouter router_;
  std::unique_ptr<Tracer> tracer_;
  CostModel time_;  // durations: the simulated hardware's rates
  CostModel cost_;  // decisions: the engine's calibrated estimate of them
  bool resident_ = false;
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::unique_ptr<RouterPredictor> predictor_;
  std::vector<PredictedExpert> predicted_;
  std::vector<double> slot_ready_;  // (n_slots) end of the last copy into the slot
  std::vector<int32_t> ids_;        // (n_tokens, top_k) the step's routing at one layer
  std::vector<int64_t> step_sizes_;
  double gpu_free_ = 0, link_free_ = 0;
  double layer_enqueue_ = 0;  // when the current layer's first kernel reached the GPU
  uint64_t tick_ = 0;
  int64_t pos_ = 0;  // tokens in the context
  int64_t prefill_tokens_ = 0;
  bool decoding_ = false;
  uint64_t decode_prefetch_bytes_ = 0;
  SimTokenTime tok_;
  SimResult res_;
};

}  // namespace

Plan sim_plan(const SimModel& m, uint64_t budget_bytes) {
  PlacementInput in = m.placement;
  in.budget_bytes = budget_bytes;
  return make_plan(in);
}

uint64_t sim_budget_for_slots(const SimModel& m, int64_t n_slots) {
  const int64_t total = int64_t{m.n_layer} * m.n_expert;
  if (n_slots < 1 || n_slots > total)
    fail(ErrorKind::invalid_arg, "--slots {}: between 1 and the model's {} experts", n_slots, total);
  const auto slots_at = [&](uint64_t b) -> int64_t {
    try {
      return sim_plan(m, b).n_slots;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::budget) throw;
      return -1;
    }
  };
  uint64_t lo = 1, hi = 1;
  while (slots_at(hi) < n_slots) hi *= 2;  // a budget that holds them
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (slots_at(mid) >= n_slots ? hi : lo) = mid;
  }
  return hi;
}

SimResult simulate_ferry(const SimModel& m, const SimRates& r, const SimOptions& o) {
  if (m.n_layer < 1 || static_cast<int32_t>(m.layers.size()) != m.n_layer)
    fail(ErrorKind::invalid_arg, "simulator: model {} has {} layer descriptions for {} layers",
         m.name, m.layers.size(), m.n_layer);
  if (o.n_batch < 1) fail(ErrorKind::invalid_arg, "simulator: batch {} < 1", o.n_batch);
  return Run(m, r, o).run();
}

}  // namespace ferry
