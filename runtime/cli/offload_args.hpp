#pragma once
// The offload flags of run / chat / logits and the object that builds the offload executor:
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
//   --sim-flow exact|device     sim: the exact synchronous flow, or the device flow cuda runs
//   --offload-decode host|table cuda decode: host-routed (one sync per MoE step, CPU experts,
//                               prediction) or from device tables (no sync, graph-recorded;
//                               misses read in place, admitted behind)
//   --offload-stats             print the executor's counters at the end
// The engine builds its CPU executor; wrap() replaces it by the offload executor when --device is
// sim, or cuda with --vram (or a plan/profile flag). On cuda the plan starts from what the dense
// part really occupies on the device, and a budget that holds every expert gets the resident
// executor instead. The expert views are rebuilt from the GGUF: the same mapping, so nothing is
// copied twice.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "offload/offload_executor.hpp"
#include "offload/predictor.hpp"
#include "runtime/engine/engine.hpp"

namespace ferry::cli {

struct OffloadArgs {
  std::string device = "cpu";
  std::string vram;
  bool print_plan = false;
  std::string plan_json;
  std::string profile, record_profile;
  std::string host_load;  // "" = the device's default
  std::string cold = "auto";
  std::string evict = "lrfu";
  int32_t prefetch =
      0;  // measured: on synthetic models prefetch displaced hot experts (bench/results)
  std::string sim_link = "13:10";
  std::string hw_profile;
  std::string sim_flow = "exact";
  std::string decode = "host";
  bool stats = false;
};

void add_offload_args(CLI::App& app, OffloadArgs& a);

class Offload {
 public:
  // ctx / type_k / type_v / n_batch: the session the plan must hold (0 ctx: the model's default).
  Offload(OffloadArgs a, int64_t n_ctx, GgmlType type_k, GgmlType type_v, int32_t n_batch);
  ~Offload();
  // --device sim, or cuda with a budget or a plan/profile flag: the offload executor replaces the
  // engine's (backend_options(args().device, args().vram, active()) then uploads no experts).
  bool active() const;
  const OffloadArgs& args() const { return a_; }
  // For LoadedModel::load: replaces the engine's executor; `then` (may be empty) wraps the result.
  // tracer (--trace; may be null): the executor's copy, wait and expert spans.
  MoeExecutorWrap wrap(MoeExecutorWrap then = {}, Tracer* tracer = nullptr);
  // After loading: feeds --stats' per-layer counters (Observability::counters(), may be null).
  void attach(StatsCounters* counters);
  // End of the run: --record-profile, --offload-stats. ErrorKind::io when a file cannot be written.
  void finish();
  OffloadExecutor* executor() { return executor_; }

 private:
  bool planning() const;  // a plan or profile flag was given
  OffloadArgs a_;
  int64_t n_ctx_;
  GgmlType type_k_, type_v_;
  int32_t n_batch_;
  OffloadExecutor* executor_ = nullptr;  // owned by the model's executor chain
  Ops* ops_ = nullptr;                    // the model's backend (cuda: graph counters in finish())
  std::unique_ptr<RouterPredictor> predictor_;
  std::unique_ptr<ExpertProfile> record_;
};

// The placement input of a model: dense bytes from the tensor table; KV cache, recurrent state and
// workspace for n_ctx / n_batch exactly as the session allocates them (state_footprint).
PlacementInput placement_input(const gguf::File& f, const ModelConfig& c, int64_t n_ctx,
                               GgmlType type_k, GgmlType type_v, int32_t n_batch,
                               uint64_t budget_bytes);

}  // namespace ferry::cli
