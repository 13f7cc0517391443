// `ferry bench --kernel-times`: the per-kernel timer (kernels/cuda/kernel_times.hpp) around each
// test's timed part, and its table: kernel | launches/token | µs/token | % of the summed kernel
// time | µs per launch, largest first, then the sum against the wall time.
#include <fmt/format.h>

#include "runtime/cli/bench_report.hpp"
#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/kernel_times.hpp"
#endif

namespace ferry::cli {

void kernel_times_timing(bool on) {
#if FERRY_HAVE_CUDA
  cuda::set_kernel_times(on);
#else
  if (on) fail(ErrorKind::unsupported, "--kernel-times: this Ferry was built without CUDA");
#endif
}

BenchKernelTimes kernel_times_take(double tokens, double wall_us) {
  BenchKernelTimes out;
#if FERRY_HAVE_CUDA
  const cuda::KernelTimes k = cuda::take_kernel_times();
  const double per = tokens > 0 ? 1.0 / tokens : 0.0;
  for (const cuda::KernelTime& t : k.kernels) {
    out.rows.push_back({t.name, static_cast<double>(t.launches) * per, t.total_us * per,
                        t.launches ? t.total_us / static_cast<double>(t.launches) : 0.0});
    out.sum_us_per_token += t.total_us * per;
  }
  out.untimed_launches = k.untimed_launches;
  out.emulated = k.emulated;
#endif
  out.wall_us_per_token = wall_us * (tokens > 0 ? 1.0 / tokens : 0.0);
  return out;
}

std::string kernel_times_md(const BenchResult& r) {
  const BenchKernelTimes& k = *r.kernel_times;
  std::string where = r.device;
  if (r.vram_budget) {
    const uint64_t b = r.vram_budget;  // as --vram takes it
    where += b % (uint64_t{1} << 30) == 0   ? fmt::format(" --vram {}G", b >> 30)
             : b % (uint64_t{1} << 20) == 0 ? fmt::format(" --vram {}M", b >> 20)
                                            : fmt::format(" --vram {}", b);
  }
  if (r.routing != "model") where += " --routing " + r.routing;
  if (!r.offload_decode.empty()) where += " --offload-decode " + r.offload_decode;
  return kernel_times_heading(fmt::format("{} of {} on {}", r.test_name(), r.model_type, where), k.emulated) +
         kernel_times_table(k);
}

std::string kernel_times_heading(const std::string& what, bool emulated) {
  return fmt::format("kernel times, {}{}:\n\n", what,
                     emulated ? " (CUDA emulator: kernels run on the CPU, these are NOT GPU timings)" : "");
}

std::string kernel_times_table(const BenchKernelTimes& k) {
  std::string out =
      "| kernel | launches/token | µs/token | % of kernel time | µs/launch "
      "|\n|---|---:|---:|---:|---:|\n";
  for (const BenchKernelTimes::Row& row : k.rows)
    out += fmt::format("| {} | {:.2f} | {:.2f} | {:.1f}% | {:.2f} |\n", row.kernel,
                       row.launches_per_token, row.us_per_token,
                       k.sum_us_per_token > 0 ? 100.0 * row.us_per_token / k.sum_us_per_token : 0.0,
                       row.us_per_launch);
  out += fmt::format(
      "\nsum of kernel times {:.1f} µs/token vs wall {:.1f} µs/token ({:.1f}% of the wall: the "
      "rest is "
      "time the GPU waited for the host)\n",
      k.sum_us_per_token, k.wall_us_per_token,
      k.wall_us_per_token > 0 ? 100.0 * k.sum_us_per_token / k.wall_us_per_token : 0.0);
  if (k.host_cpu_us_per_token)
    out += fmt::format(
        "host CPU {:.1f} µs/token vs wall {:.1f} µs/token ({:.1f}% of the wall: the step thread's own CPU "
        "time; the CUDA runtime's spin while it waits for the device counts too)\n",
        *k.host_cpu_us_per_token, k.wall_us_per_token,
        k.wall_us_per_token > 0 ? 100.0 * *k.host_cpu_us_per_token / k.wall_us_per_token : 0.0);
  if (k.untimed_launches)
    out += fmt::format("{} launches were captured into CUDA graphs and are not timed\n",
                       k.untimed_launches);
  return out;
}

std::string kernel_times_json(const BenchKernelTimes& k) {
  std::string rows;
  for (const BenchKernelTimes::Row& row : k.rows)
    rows += fmt::format(
        "{}{{\"kernel\": \"{}\", \"launches_per_token\": {}, \"us_per_token\": {}, "
        "\"us_per_launch\": {}}}",
        rows.empty() ? "" : ", ", escape_json(row.kernel), row.launches_per_token, row.us_per_token,
        row.us_per_launch);
  return fmt::format(
      "{{\"emulated\": {}, \"sum_us_per_token\": {}, \"wall_us_per_token\": {}, "
      "\"host_cpu_us_per_token\": {}, "
      "\"untimed_launches\": {}, "
      "\"kernels\": [{}]}}",
      k.emulated, k.sum_us_per_token, k.wall_us_per_token,
      k.host_cpu_us_per_token ? fmt::format("{}", *k.host_cpu_us_per_token) : std::string("null"),
      k.untimed_launches, rows);
}

}  // namespace ferry::cli
