#include <fmt/format.h>

#include <algorithm>

#include "offload/offload_executor.hpp"

namespace ferry {

std::string offload_stats_text(const OffloadStats& s) {
  const auto pct = [](uint64_t a, uint64_t b) {
    return b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0;
  };
  std::string t = fmt::format(
      "offload: {} slots, {} steps, {} tokens; expert uses {}: hits {} ({:.1f}%), prefetch in "
      "flight {} (waited {}), "
      "misses {} → cpu {}, copy-now {}, streamed {}, read in place {} ({:.1f} MB)\n",
      s.n_slots, s.steps, s.tokens, s.uses, s.hits, pct(s.hits, s.uses), s.inflight, s.waited,
      s.misses, s.cpu_experts, s.copy_now, s.streamed, s.mapped,
      static_cast<double>(s.mapped_bytes) / 1e6);
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
  {
    t += fmt::format(
        "offload: device idle {:.3f} ms/token waiting for copies, {:.3f} for CPU experts, {:.3f} "
        "for the host "
        "(sync + decisions)",
        s.wait_ms / tok, s.device_wait_ms[static_cast<int>(WaitCause::cpu_expert)] / tok,
        s.device_wait_ms[static_cast<int>(WaitCause::sync)] / tok);
    if (s.stream_bytes)
      t += fmt::format(
          "; prefill streaming {:.1f} MB in {:.1f} ms of device time, its kernels included ({:.2f} "
          "GB/s)",
          static_cast<double>(s.stream_bytes) / 1e6, s.stream_gpu_ms,
          s.stream_gpu_ms > 0 ? static_cast<double>(s.stream_bytes) / (s.stream_gpu_ms * 1e6)
                              : 0.0);
    t += "\n";
  }
  if (s.table_tokens)
    t += fmt::format(
        "offload: {} decode tokens from the device tables (no host sync), {} table entries "
        "rewritten\n",
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

}  // namespace ferry
