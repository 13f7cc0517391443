#pragma once
// The offload engine's end-of-run report (--offload-stats): its counters and the cuda graph
// counters. The flags themselves are registered with the other run flags (run_args.hpp).
#include "runtime/engine/engine.hpp"

namespace ferry::cli {

// Settles the MoE executor, then prints --offload-stats when it was asked for and the engine ran.
void print_offload_stats(LoadedModel& m);

}  // namespace ferry::cli
