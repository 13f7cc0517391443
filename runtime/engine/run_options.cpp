#include "runtime/engine/run_options.hpp"

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace ferry {

RunPlan plan_run(const RunOptions& o) {
  const OffloadSettings& a = o.offload;
  const bool table = a.decode == DecodeMode::table;
  if (o.device == DeviceKind::cpu && (o.vram_bytes || a.planning()))
    fail(ErrorKind::invalid_arg,
         "--vram, --print-plan, --plan-json and the profiles need --device sim (or cuda)");
  if (a.prefetch < 0 || a.prefetch > 8)
    fail(ErrorKind::invalid_arg, "--prefetch {}: expected 0..8", a.prefetch);
  if (table && o.device == DeviceKind::cpu)
    fail(ErrorKind::invalid_arg,
         "--offload-decode table needs --device cuda or sim (the offload engine)");
  if (table && o.device == DeviceKind::cuda && a.host_load == HostLoad::alias)
    fail(ErrorKind::invalid_arg,
         "--offload-decode table reads misses in place from pinned host memory: --host-load alias "
         "is not pinned (use uring, mmap or registered)");
  RunPlan p;
  p.backend = o.device == DeviceKind::cuda ? DeviceKind::cuda : DeviceKind::cpu;
  if (p.backend == DeviceKind::cuda) p.cuda_budget_bytes = o.vram_bytes.value_or(0);
  p.fit = p.backend == DeviceKind::cuda && !o.vram_bytes && o.fit.enabled;
  p.offload = o.device == DeviceKind::sim ||
              (o.device == DeviceKind::cuda && (o.vram_bytes || a.planning()));
  p.offload_device = o.device == DeviceKind::cuda ? DeviceKind::cuda : DeviceKind::sim;
  if (o.device == DeviceKind::sim) p.sim_budget_bytes = o.vram_bytes.value_or(0);
  if (o.fit.min_ctx < 16) fail(ErrorKind::invalid_arg, "--fit-ctx {}: expected at least 16", o.fit.min_ctx);
  if (table && o.device == DeviceKind::cuda && !p.offload && !p.fit)
    log::warn(
        "--offload-decode table applies to offloaded models: without --vram every expert is "
        "resident on the GPU, whose decode needs no host synchronisation anyway");
  return p;
}

}  // namespace ferry
