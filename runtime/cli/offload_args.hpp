#pragma once
// The offload flags of run / chat / logits / bench (docs/options.md lists each with its default):
//   --device cpu|sim|cuda|auto  where routed experts run (sim: the offload engine on the host)
//   --vram SIZE                 device budget (K/M/G suffix); none: every expert resident
//   --print-plan, --plan-json FILE     the placement (bytes per component, slots, per layer)
//   --profile FILE, --record-profile FILE   activation profile in / out (placement_profile.hpp)
//   --host-load uring|mmap|registered|alias   how the host store is filled (sim default: alias)
//   --cold auto|cpu|copy|mapped force the cold-expert path (default: the cost model decides)
//   --evict lrfu|lru            cache eviction policy
//   --prefetch N                predictor depth (layers ahead), 0 = no prefetch (default)
//   --sim-link GBPS[:LAT_US]    sim device's host→device link model (default 13:10, PCIe 4.0 x8)
//   --hw-profile FILE           cost model rates from profiles/hardware/*.json (default: calibrate)
//   --offload-decode host|table decode: host-routed (one sync per MoE step, CPU experts,
//                               prediction) or from device tables (no sync, graph-recorded;
//                               misses read in place, admitted behind)
//   --offload-stats             print the executor's counters at the end
// The flags only fill OffloadSettings; the engine builds the executor (runtime/engine/moe_setup.hpp).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "runtime/engine/engine.hpp"

namespace ferry::cli {

using OffloadArgs = OffloadSettings;

void add_offload_args(CLI::App& app, OffloadArgs& a);

// End of a run: --offload-stats (the offload executor's counters, the cuda graph counters).
void print_offload_stats(LoadedModel& m);

}  // namespace ferry::cli
