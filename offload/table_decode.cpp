#include "offload/table_decode.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

size_t pad256(size_t n) {
  return (n + 255) / 256 * 256;
}

// Forwards the log's layers to the executor's counting, then to the observers.
class LogSink final : public MoeObserver {
 public:
  const ObserverSet* observers = nullptr;
  const std::function<void(int32_t, int32_t)>* use = nullptr;
  void on_routing(const RoutingView& r) override {
    for (int32_t j = 0; j < r.top_k; ++j) (*use)(r.layer, r.ids[j]);
    if (observers) observers->routing(r);
  }
};

}  // namespace

uint64_t TableDecoder::device_bytes(int32_t n_layer, int32_t n_expert, int32_t top_k,
                                    int64_t n_embd) {
  const auto L = static_cast<size_t>(n_layer);
  // The tables, the per-slot outputs, and a one-token routing log (ids + weights per layer; x too
  // when an observer wants it).
  return pad256(L * static_cast<size_t>(n_expert) * sizeof(ExpertPtrs)) +
         pad256(static_cast<size_t>(top_k) * static_cast<size_t>(n_embd) * 4) +
         L * pad256(static_cast<size_t>(top_k) * 8);
}

TableDecoder::TableDecoder(Device& dev, Stream& compute, DeviceExpertKernels& kernels,
                           std::vector<ExpertShape> shapes,
                           const std::vector<MoeLayerWeights>& mapped, int32_t top_k)
    : dev_(dev),
      compute_(compute),
      kernels_(kernels),
      shapes_(std::move(shapes)),
      n_expert_(mapped.empty() ? 0 : mapped[0].n_expert),
      top_k_(top_k),
      log_(dev, compute, static_cast<int32_t>(mapped.size()), top_k,
           shapes_.empty() ? 0 : shapes_[0].n_embd) {
  const size_t n = mapped.size() * static_cast<size_t>(n_expert_);
  tables_dev_ = dev_.alloc(n * sizeof(ExpertPtrs), "expert tables (decode)");
  int64_t max_embd = 0;
  for (const ExpertShape& sh : shapes_) max_embd = std::max(max_embd, sh.n_embd);
  y_dev_ = dev_.alloc(static_cast<size_t>(top_k) * static_cast<size_t>(max_embd) * sizeof(float),
                      "per-slot outputs (decode)");
  tables_host_ = dev_.alloc_host(n * sizeof(ExpertPtrs), true);
  if (!tables_host_.pinned())
    fail(ErrorKind::device,
         "--offload-decode table: pinned host memory for the tables could not be allocated");
  std::fill_n(static_cast<ExpertPtrs*>(tables_host_.data()), n,
              ExpertPtrs{});  // nothing copied yet
  for (const MoeLayerWeights& w : mapped)
    for (int32_t e = 0; e < n_expert_; ++e) mapped_.push_back(expert_ptrs(w, e));
  tables_copied_ = dev_.create_event();
}

void TableDecoder::run(const MoeStep& s) {
  if (!synced_)
    fail(ErrorKind::internal,
         "offload: a decode step from the device tables without begin_step(1)");
  if (s.top_k != top_k_)
    fail(ErrorKind::internal, "offload: top-{} step, the tables were made for top-{}", s.top_k,
         top_k_);
  const auto l = static_cast<size_t>(s.layer);
  const auto* table =
      static_cast<const ExpertPtrs*>(tables_dev_.data()) + l * static_cast<size_t>(n_expert_);
  kernels_.experts_per_slot(shapes_[l], table, n_expert_, s.expert_ids, 1, s.top_k, s.x, y_dev_.f32(),
                            compute_);
  kernels_.weighted_sum(y_dev_.f32(), s.expert_weights, 1, s.top_k, s.n_embd, s.out, compute_);
  log_.log(s);
  pending_ = true;
}

void TableDecoder::read_log(const ObserverSet* observers,
                            const std::function<void(int32_t, int32_t)>& use) {
  if (!pending_) return;
  pending_ = false;
  LogSink sink;
  sink.observers = observers;
  sink.use = &use;
  ObserverSet set;
  set.add(&sink);
  log_.flush(set);
}

uint64_t TableDecoder::begin_step(const ExpertCache& cache,
                                  const std::function<ExpertPtrs(int32_t, int32_t)>& slot,
                                  const ObserverSet* observers) {
  // Callers read the log first (read_log), so this reports nothing; it sizes the log and decides
  // whether x is logged.
  static const ObserverSet none;
  log_.begin_step(1, observers ? *observers : none);
  return sync(cache, slot);
}

uint64_t TableDecoder::sync(const ExpertCache& cache,
                            const std::function<ExpertPtrs(int32_t, int32_t)>& slot) {
  // The pinned mirror is rewritten below: its last copy must have run (it normally has).
  if (tables_pending_) {
    tables_copied_->synchronize();
    tables_pending_ = false;
  }
  synced_ = true;
  // Nothing to rewrite while the cache's content is what the tables were last synced with.
  if (version_ == cache.version()) return 0;
  version_ = cache.version();
  const auto E = static_cast<size_t>(n_expert_);
  want_ = mapped_;
  for (int32_t s = 0; s < cache.n_slots(); ++s)
    if (cache.state(s) == SlotState::ready) {
      const int32_t l = cache.layer_of(s);
      want_[static_cast<size_t>(l) * E + static_cast<size_t>(cache.expert_of(s))] = slot(s, l);
    }
  auto* host = static_cast<ExpertPtrs*>(tables_host_.data());
  // Changed layers, runs of consecutive ones copied at once.
  const size_t L = shapes_.size();
  size_t run_begin = L;
  uint64_t updates = 0;
  const auto flush = [&](size_t end) {
    if (run_begin == L) return;
    compute_.copy_h2d(static_cast<ExpertPtrs*>(tables_dev_.data()) + run_begin * E,
                      host + run_begin * E, (end - run_begin) * E * sizeof(ExpertPtrs));
    tables_pending_ = true;
    run_begin = L;
  };
  for (size_t l = 0; l < L; ++l) {
    size_t changed = 0;
    for (size_t e = l * E; e < (l + 1) * E; ++e)
      if (host[e] != want_[e]) {
        host[e] = want_[e];
        ++changed;
      }
    updates += changed;
    if (changed && run_begin == L) run_begin = l;
    if (!changed) flush(l);
  }
  flush(L);
  if (tables_pending_) compute_.record(*tables_copied_);
  return updates;
}

}  // namespace ferry
