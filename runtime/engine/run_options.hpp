#pragma once
// The typed options of a model run, parsed once by the CLI (runtime/cli/run_args.hpp), and the run
// plan derived from them in one place: where the dense ops run, and whether the offload engine runs
// the routed experts under a budget. Both the backend and the MoE setup read the plan, so --device
// and --vram mean the same thing everywhere.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offload/offload.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/engine/fit.hpp"
#include "runtime/moe/routing.hpp"
#include "runtime/moe/step.hpp"

namespace ferry {

class Tracer;

// The backend's switches (docs/options.md): the cpu ones for the cpu backend, the cuda ones for cuda.
struct BackendSwitches {
  CpuOpsOptions cpu;
  CudaOpsOptions cuda;
};

// The routing override and the observers' flags (docs/routing.md).
struct ObserveSettings {
  RoutingSpec routing;          // --routing, --routing-seed
  std::string record_routing;   // --record-routing FILE
  bool stats = false;           // --stats
  std::string trace;            // --trace FILE (the CLI owns the tracer)
};

struct RunOptions {
  DeviceKind device = DeviceKind::cpu;   // --device (auto is resolved by the parser)
  std::optional<uint64_t> vram_bytes;    // --vram; nullopt: fit to the card (cuda) or no limit
  FitSettings fit;                       // --fit, -fitt, -fitc: cuda without --vram (fit.hpp)
  BackendSwitches backend;
  OffloadSettings offload;
  ObserveSettings observe;
  // The session the offload plan must hold (n_ctx 0: the model's default context). Only n_ctx is
  // the user's -c, which the fit never changes; default_ctx is the context a run gets without it
  // (0: default_context(); ferry serve: its slots' total, default_serve_context), which the fit
  // may shrink as llama.cpp's fit shrinks a context the user did not set.
  int64_t n_ctx = 0;
  int64_t default_ctx = 0;
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;
  int32_t n_batch = 512;
  Tracer* tracer = nullptr;             // --trace (not owned; may be null)
  std::vector<MoeObserver*> observers;  // more observers (not owned), e.g. a benchmark's
};

// Where a run's work goes. The dense ops run on cpu (devices cpu and sim) or cuda; the offload
// engine runs the routed experts on sim (always), or on cuda with a budget or a placement flag.
struct RunPlan {
  DeviceKind backend = DeviceKind::cpu;  // cpu or cuda: the Ops of the forward
  uint64_t cuda_budget_bytes = 0;        // cuda: the device budget (0: the free memory)
  bool fit = false;                      // cuda: fit the budget to the card (fit.hpp) at load
  bool offload = false;                  // the offload engine runs the experts
  DeviceKind offload_device = DeviceKind::sim;  // sim or cuda (when offload)
  uint64_t sim_budget_bytes = 0;                // sim: the device budget (0: no limit)
};

// Checks the combinations (ErrorKind::invalid_arg naming the flags) and derives the plan. On cuda
// without --vram (and --fit on) the plan says `fit`: the load measures the card and sets the
// budget (and whether to offload) with fit_to_device.
RunPlan plan_run(const RunOptions& o);

}  // namespace ferry
