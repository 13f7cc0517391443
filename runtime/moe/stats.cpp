#include "runtime/moe/stats.hpp"

#include <chrono>

#include <fmt/format.h>

namespace ferry {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double pct(uint64_t a, uint64_t b) { return b ? 100.0 * double(a) / double(b) : 0.0; }
double mib(uint64_t b) { return double(b) / (1024.0 * 1024.0); }

}  // namespace

const char* wait_cause_name(WaitCause c) {
  switch (c) {
    case WaitCause::copy: return "copy";
    case WaitCause::cpu_expert: return "cpu_expert";
    case WaitCause::sync: return "sync";
  }
  return "?";
}

const char* count_name(Count c) {
  static constexpr const char* kNames[kCounts] = {
      "steps", "inflight", "waited", "copy_now", "streamed", "mapped", "mapped_bytes", "table_tokens",
      "table_updates", "init_bytes", "cpu_ns", "compute_ns", "stream_gpu_ns", "stream_bytes",
      "prefetch_requested", "prefetch_dropped_stale", "prefetch_dropped_no_slot", "admitted",
      "admit_dropped", "prefetch_bytes"};
  const int i = static_cast<int>(c);
  return i >= 0 && i < kCounts ? kNames[i] : "?";
}

StatsCounters::StatsCounters(int32_t n_layer)
    : n_layer_(n_layer > 0 ? n_layer : 0), layers_(std::make_unique<Layer[]>(static_cast<size_t>(n_layer_))) {
  t0_ns_.store(now_ns());
}

StatsCounters::~StatsCounters() = default;

void StatsCounters::h2d(int32_t layer, uint64_t bytes) {
  if (layer >= 0 && layer < n_layer_) add(layer, kH2d, bytes);
  else h2d_other_.fetch_add(bytes, std::memory_order_relaxed);
}

void StatsCounters::vram_in_use(uint64_t bytes) {
  uint64_t cur = vram_peak_.load(std::memory_order_relaxed);
  while (bytes > cur && !vram_peak_.compare_exchange_weak(cur, bytes, std::memory_order_relaxed)) {
  }
}

StatsSnapshot StatsCounters::snapshot() const {
  StatsSnapshot s;
  s.layers.resize(static_cast<size_t>(n_layer_));
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const auto& v = layers_[l].v;
    const auto g = [&](Field f) { return v[f].load(std::memory_order_relaxed); };
    LayerCounts& c = s.layers[l];
    c = {g(kHit), g(kMiss), g(kCpu), g(kPfIssued), g(kPfUsed), g(kPfWasted), g(kPfIssuedBytes), g(kPfWastedBytes),
         g(kH2d)};
    s.total.hit += c.hit;
    s.total.miss += c.miss;
    s.total.cpu_expert += c.cpu_expert;
    s.total.prefetch_issued += c.prefetch_issued;
    s.total.prefetch_used += c.prefetch_used;
    s.total.prefetch_wasted += c.prefetch_wasted;
    s.total.prefetch_issued_bytes += c.prefetch_issued_bytes;
    s.total.prefetch_wasted_bytes += c.prefetch_wasted_bytes;
    s.total.h2d_bytes += c.h2d_bytes;
  }
  s.total.h2d_bytes += h2d_other_.load(std::memory_order_relaxed);
  s.tokens = tokens_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < wait_ns_.size(); ++i) s.wait_ns[i] = wait_ns_[i].load(std::memory_order_relaxed);
  for (size_t i = 0; i < counts_.size(); ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  s.vram_peak_bytes = vram_peak_.load(std::memory_order_relaxed);
  s.wall_ms = double(now_ns() - t0_ns_.load()) / 1e6;
  return s;
}

void StatsCounters::reset() {
  for (int32_t l = 0; l < n_layer_; ++l)
    for (auto& a : layers_[static_cast<size_t>(l)].v) a.store(0, std::memory_order_relaxed);
  h2d_other_.store(0);
  tokens_.store(0);
  vram_peak_.store(0);
  for (auto& a : wait_ns_) a.store(0);
  for (auto& a : counts_) a.store(0);
  t0_ns_.store(now_ns());
}

std::string stats_table(const StatsSnapshot& s) {
  std::string out = fmt::format("{:>5} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10}\n", "layer", "uses", "hit%",
                                "misses", "cpu_exp", "pf_issued", "pf_prec%", "pf_rec%", "pf_wasteMiB");
  const auto row = [&](const std::string& name, const LayerCounts& c) {
    const uint64_t uses = c.hit + c.miss;
    // Without prefetches precision/recall are undefined: "-" rather than a misleading 0.
    const bool pf = c.prefetch_issued > 0;
    out += fmt::format("{:>5} {:>8} {:>8.1f} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10.1f}\n", name, uses,
                       pct(c.hit, uses), c.miss, c.cpu_expert, c.prefetch_issued,
                       pf ? fmt::format("{:.1f}", pct(c.prefetch_used, c.prefetch_issued)) : "-",
                       pf ? fmt::format("{:.1f}", pct(c.prefetch_used, c.prefetch_used + c.miss)) : "-",
                       mib(c.prefetch_wasted_bytes));
  };
  for (size_t l = 0; l < s.layers.size(); ++l) row(std::to_string(l), s.layers[l]);
  row("all", s.total);
  const double tok = s.tokens ? double(s.tokens) : 1.0;
  out += fmt::format("tokens {}  wall {:.1f} ms  H2D {:.2f} MiB/token ({:.1f} MiB total)  VRAM peak {:.1f} MiB\n",
                     s.tokens, s.wall_ms, mib(s.total.h2d_bytes) / tok, mib(s.total.h2d_bytes),
                     mib(s.vram_peak_bytes));
  uint64_t wait_total = 0;
  for (uint64_t w : s.wait_ns) wait_total += w;
  out += fmt::format("GPU wait per token: {:.3f} ms", double(wait_total) / 1e6 / tok);
  for (int c = 0; c < kWaitCauses; ++c)
    out += fmt::format("  {} {:.3f}", wait_cause_name(static_cast<WaitCause>(c)), double(s.wait_ns[static_cast<size_t>(c)]) / 1e6 / tok);
  out += "\n";
  return out;
}

}  // namespace ferry
