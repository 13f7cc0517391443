#pragma once
// The offload engine's public face, and the one offload header the engine includes
// (tests/layers/check_layers.py holds it to that): the typed settings of the offload flags, the
// placement input the engine measures, and the factory that returns the engine as a MoeExecutor.
// Everything else in offload/ is the engine's inside.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/core/named.hpp"
#include "runtime/moe/step.hpp"

namespace ferry {

class ExpertPredictor;
class OffloadExecutor;
class StatsCounters;
class Tracer;

// What a decode miss does when the cost model does not decide (--cold).
enum class ColdMode { auto_, cpu, copy, mapped };
inline constexpr std::array<Named<ColdMode>, 4> kColdModes{
    {{"auto", ColdMode::auto_}, {"cpu", ColdMode::cpu}, {"copy", ColdMode::copy}, {"mapped", ColdMode::mapped}}};

// The expert cache's eviction order (--evict).
enum class EvictionPolicy { lru, lrfu };
inline constexpr std::array<Named<EvictionPolicy>, 2> kEvictionPolicies{
    {{"lrfu", EvictionPolicy::lrfu}, {"lru", EvictionPolicy::lru}}};

// How the host expert store is filled (--host-load; offload/host_store.hpp).
enum class HostLoad { alias, mmap, uring, registered };
inline constexpr std::array<Named<HostLoad>, 4> kHostLoads{{{"uring", HostLoad::uring},
                                                             {"mmap", HostLoad::mmap},
                                                             {"registered", HostLoad::registered},
                                                             {"alias", HostLoad::alias}}};
const char* host_load_name(HostLoad m);

// How offloaded decode steps run (--offload-decode): host-routed (one synchronisation per MoE
// step; CPU experts, cost model, prediction) or from device tables (no synchronisation).
enum class DecodeMode { host, table };
inline constexpr std::array<Named<DecodeMode>, 2> kDecodeModes{
    {{"host", DecodeMode::host}, {"table", DecodeMode::table}}};

// The offload flags as typed values (docs/options.md lists each with its default). The device and
// the budget are not here: they are the run's (runtime/engine/run_options.hpp), parsed once.
struct OffloadSettings {
  bool print_plan = false;     // --print-plan
  std::string plan_json;       // --plan-json FILE
  std::string profile;         // --profile FILE: the initial hot set
  std::string record_profile;  // --record-profile FILE
  std::optional<HostLoad> host_load;  // nullopt: the device's default (sim alias, cuda uring)
  ColdMode cold = ColdMode::auto_;
  EvictionPolicy evict = EvictionPolicy::lrfu;
  int32_t prefetch = 0;  // layers ahead; measured: prefetch displaced hot experts (bench/results)
  SimLinkModel sim_link{13.0, 13.0, 10.0};  // --sim-link GBPS[:LATENCY_US] (PCIe 4.0 x8)
  std::string hw_profile;                    // --hw-profile FILE (empty: calibrate)
  DecodeMode decode = DecodeMode::host;
  bool stats = false;  // --offload-stats

  // A flag that asks for the placement (and so the engine, even on cuda without a budget).
  bool planning() const {
    return print_plan || !plan_json.empty() || !profile.empty() || !record_profile.empty();
  }
};

// The placement input of a model (the engine measures it: runtime/engine/moe_setup.hpp).
struct PlacementInput {
  std::string model;    // for messages
  int32_t n_layer = 0;  // layers with routed experts
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  std::vector<uint64_t> layer_expert_bytes;  // (n_layer) one expert's gate + up + down bytes
  uint64_t dense_bytes = 0;                  // everything but routed experts
  uint64_t kv_bytes = 0;                     // attention KV cache for n_ctx
  uint64_t state_bytes = 0;                  // recurrent (DeltaNet) state
  uint64_t workspace_bytes = 0;
  // The offload device flow's per-step buffers (table and routing upload, CPU expert sum, expert
  // kernel scratch) for the largest batch: left free, allocated by the executor as steps need
  // them (offload/offload_executor.hpp: device_step_bytes).
  uint64_t step_bytes = 0;
  int64_t n_ctx = 0;          // for messages
  std::string kv_types;       // "f16/f16", for messages
  uint64_t budget_bytes = 0;  // 0 = no limit: every expert gets a slot
};

// What the engine hands the factory.
struct OffloadRequest {
  OffloadSettings settings;
  DeviceKind device = DeviceKind::sim;  // sim (a device of its own) or cuda (the backend's)
  uint64_t sim_budget_bytes = 0;        // sim: --vram (0: no limit)
  std::vector<MoeLayerWeights> layers;  // views into the mapping
  std::string gguf_path;
  // (n_layer) absolute file offsets of ffn_gate_exps, ffn_up_exps, ffn_down_exps.
  std::vector<std::array<uint64_t, 3>> file_offsets;
  PlacementInput placement;  // step_bytes and, on cuda, the dense part are the factory's
  uint64_t cuda_extra_workspace_bytes = 0;  // cuda: backend scratch the model's shape needs
  int64_t max_batch = 512;
  Ops* ops = nullptr;                    // cuda: the forward's ops (device, stream, budget)
  ExpertPredictor* predictor = nullptr;  // prefetch (settings.prefetch > 0); not owned
  Tracer* tracer = nullptr;              // not owned; may be null
  StatsCounters* counters = nullptr;     // the run's counters sink; not owned, required
};

struct OffloadBuild {
  std::unique_ptr<MoeExecutor> executor;  // null: (cuda) every expert fits, run them resident
  OffloadExecutor* engine = nullptr;      // the same object, for the reports
};

// cuda: the workspace a plan reserves beyond the session's own: the CudaOps workspaces, a margin for
// the attention scratch, and extra_bytes of backend scratch (the chunked DeltaNet prefill's). The
// factory plans with it; the engine's fit to the card (runtime/engine/fit.hpp) counts the same.
uint64_t cuda_plan_workspace_bytes(const Ops& ops, uint64_t extra_bytes);

struct ExpertShape;  // runtime/moe/cpu_experts.hpp

// The offload engine's per-step device buffers for steps of up to max_batch tokens of experts
// shaped `shape` (PlacementInput::step_bytes, as the factory sets it for the host decode flow).
uint64_t offload_step_bytes(int64_t max_batch, const ExpertShape& shape, int32_t top_k, int32_t n_expert);
// The least budget the placement accepts for `in` (its budget ignored): the fixed part — dense,
// KV, state, workspace, step buffers, the prefill staging slots — and one layer's top-k slots.
// The engine's fit to the card (runtime/engine/fit.hpp) holds at least this.
uint64_t offload_min_budget_bytes(const PlacementInput& in);

// Plans the placement (prints/writes it when asked), fills the host store and builds the engine.
// ErrorKind::budget when the budget cannot hold the fixed part; ErrorKind::io for files.
OffloadBuild make_offload_executor(OffloadRequest r);

}  // namespace ferry
