// sim_result_text: a simulated run in --stats' terms; every figure is the simulator's estimate.
#include <fmt/format.h>

#include "offload/simulate.hpp"

namespace ferry {

std::string sim_result_text(const SimResult& s) {
  std::string t;
  if (!s.fits) {
    t += fmt::format("{}: does not fit ({})\n", s.strategy_name(), s.note);
    if (s.tg_tps <= 0) return t;
    t += fmt::format("{}: timed anyway, as if the memory were there:\n", s.strategy_name());
  }
  const auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
  t += fmt::format("{}: estimated pp {:.1f} tok/s, tg {:.1f} tok/s{}{}\n", s.strategy_name(), s.pp_tps,
                   s.tg_tps, s.note.empty() ? "" : "; ", s.note);
  if (s.strategy == SimStrategy::ferry) {
    t += fmt::format(
        "{}: {} slots ({:.1f}% of experts); expert uses {}: hits {} ({:.1f}%), prefetch in flight "
        "{} (waited {}), misses {} -> cpu {}, copy-now {}, streamed {}\n",
        s.strategy_name(), s.n_slots, 100.0 * s.experts_on_gpu_fraction, s.hits + s.misses, s.hits,
        100.0 * s.hit_rate(), s.inflight, s.waited, s.misses - s.inflight, s.cpu_experts,
        s.copy_now, s.streamed);
    t += fmt::format(
        "{}: prefetch issued {} used {} wasted {}; admitted {} (dropped {}); H2D demand+stream "
        "{:.1f} MB, prefetch+admit {:.1f} MB\n",
        s.strategy_name(), s.prefetch.issued, s.prefetch.used, s.prefetch.wasted, s.prefetch.admitted,
        s.prefetch.admit_dropped, double(s.h2d_demand_bytes) / 1e6,
        double(s.h2d_prefetch_bytes) / 1e6);
    t += fmt::format("{}: decode hit rate {:.1f}%, H2D {:.2f} MiB/token\n", s.strategy_name(),
                     100.0 * s.decode_hit_rate(), s.h2d_per_token() / 1048576.0);
  } else {
    t += fmt::format("{}: {:.1f}% of expert bytes on the GPU\n", s.strategy_name(),
                     100.0 * s.experts_on_gpu_fraction);
  }
  const SimTokenTime& k = s.token;
  t += fmt::format(
      "{}: per decoded token {:.0f} us (estimated): GPU dense {:.0f}, GPU experts {:.0f}, launches "
      "{:.0f}, cache scans {:.0f}, CPU experts {:.0f}, link busy {:.0f}; GPU waits: copy {:.0f} "
      "({:.1f}%), cpu_expert {:.0f} ({:.1f}%), sync {:.0f} ({:.1f}%)\n",
      s.strategy_name(), k.total_us, k.gpu_dense_us, k.gpu_expert_us, k.launch_us, k.cache_scan_us,
      k.cpu_expert_us, k.link_us, k.gpu_wait_us[0], pct(k.gpu_wait_us[0], k.total_us), k.gpu_wait_us[1],
      pct(k.gpu_wait_us[1], k.total_us), k.gpu_wait_us[2], pct(k.gpu_wait_us[2], k.total_us));
  return t;
}

}  // namespace ferry
