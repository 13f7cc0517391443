#include "runtime/moe/routing_log.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace ferry {

RoutingLog::RoutingLog(Device& dev, Stream& stream, int32_t n_layer, int32_t top_k, int64_t n_embd)
    : dev_(dev),
      s_(stream),
      n_layer_(n_layer),
      top_k_(top_k),
      n_embd_(n_embd),
      copied_(dev.create_event()),
      logged_(static_cast<size_t>(n_layer), 0) {}

size_t RoutingLog::stride() const {
  const auto nk = static_cast<size_t>(n_tokens_) * static_cast<size_t>(top_k_);
  return (nk * 8 + (with_x_ ? static_cast<size_t>(n_embd_) * 4 : 0) + 255) / 256 * 256;
}

void RoutingLog::begin_step(int64_t n_tokens, const ObserverSet& obs) {
  flush(obs);
  n_tokens_ = n_tokens;
  with_x_ = n_tokens == 1 && obs.wants_x();
  const size_t need = stride() * static_cast<size_t>(n_layer_);
  if (need <= dev_buf_.bytes()) return;
  const size_t floor =
      static_cast<size_t>(n_layer_) * ((64 * static_cast<size_t>(top_k_) * 8 + 255) / 256 * 256);
  dev_buf_ = DeviceBuffer();
  host_buf_ = HostBuffer();
  dev_buf_ = dev_.alloc(std::max(need, floor), "routing log (observers)");
  host_buf_ = dev_.alloc_host(dev_buf_.bytes(), /*pinned=*/true);
}

void RoutingLog::log(const MoeStep& s) {
  if (s.layer < 0 || s.layer >= n_layer_ || s.n_tokens != n_tokens_ || s.top_k != top_k_ ||
      s.n_embd != n_embd_)
    fail(ErrorKind::internal,
         "routing log: step layer {} of {} tokens top-{} (log: {} layers, {} tokens, top-{})",
         s.layer, s.n_tokens, s.top_k, n_layer_, n_tokens_, top_k_);
  auto* base = static_cast<uint8_t*>(dev_buf_.data()) + static_cast<size_t>(s.layer) * stride();
  const size_t nk = static_cast<size_t>(s.n_tokens) * static_cast<size_t>(s.top_k);
  s_.copy_d2d(base, s.expert_ids, nk * 4);
  s_.copy_d2d(base + nk * 4, s.expert_weights, nk * 4);
  if (with_x_) s_.copy_d2d(base + nk * 8, s.x, static_cast<size_t>(n_embd_) * 4);
  logged_[static_cast<size_t>(s.layer)] = 1;
}

void RoutingLog::end_step() {
  if (std::find(logged_.begin(), logged_.end(), 1) == logged_.end()) return;
  s_.copy_d2h(host_buf_.data(), dev_buf_.data(), stride() * static_cast<size_t>(n_layer_));
  s_.record(*copied_);
  pending_ = true;
}

void RoutingLog::flush(const ObserverSet& obs) {
  if (!pending_) return;
  // Normally complete: the forward read its logits after the copy was queued.
  if (!copied_->query()) copied_->synchronize();
  pending_ = false;
  const size_t nk = static_cast<size_t>(n_tokens_) * static_cast<size_t>(top_k_);
  for (int32_t l = 0; l < n_layer_; ++l) {
    if (!logged_[static_cast<size_t>(l)]) continue;
    logged_[static_cast<size_t>(l)] = 0;
    const auto* base =
        static_cast<const uint8_t*>(host_buf_.data()) + static_cast<size_t>(l) * stride();
    obs.routing(RoutingView{
        l, static_cast<int32_t>(n_tokens_), top_k_, static_cast<int32_t>(n_embd_),
        reinterpret_cast<const int32_t*>(base), reinterpret_cast<const float*>(base + nk * 4),
        with_x_ ? reinterpret_cast<const float*>(base + nk * 8) : nullptr, false});
  }
}

}  // namespace ferry
