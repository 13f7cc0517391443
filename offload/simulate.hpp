#pragma once
// The offload simulator: the engine's own decision code — the placement (placement.hpp), the
// expert cache (expert_cache.hpp), decide() and the cost model, the prefetcher and its
// admissions (prefetcher.hpp), the router-free predictor (predictor.hpp: prev + freq) — driven
// step by step, in the order OffloadExecutor::run_host_routed drives them, in virtual time, with
// routing from offload/routing* and durations from a hardware profile (simulate_rates.hpp). Nothing
// is computed and no weight is read: a MoE model is its tensor sizes (SimModel), so the real
// 35B shapes simulate in milliseconds on a laptop. docs/simulator.md states the model.
//
// Deterministic: the same inputs give the same result and the same trace bytes (no wall clock,
// seeded routing). With --cold copy and no prefetch no decision depends on time, so hits,
// misses and bytes copied equal the sim device's for the same routing and budget
// (tests/offload/test_simulate.cpp).
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "offload/decide.hpp"
#include "offload/expert_cache.hpp"
#include "runtime/core/named.hpp"
#include "runtime/moe/cpu_experts.hpp"
#include "offload/placement.hpp"
#include "offload/prefetcher.hpp"
#include "runtime/moe/routing.hpp"
#include "offload/simulate_rates.hpp"
#include "runtime/moe/stats.hpp"
#include "runtime/moe/trace.hpp"

namespace ferry {

// Weight bytes of one type (a kernel's time depends on both).
struct TypedBytes {
  GgmlType type = GgmlType::F32;
  uint64_t bytes = 0;
  uint64_t elements = 0;
};

struct SimLayer {
  ExpertShape expert;                // one routed expert: types and sizes of gate, up, down
  std::vector<TypedBytes> dense;     // the layer's dense weights, read once per step
  bool attention = false;            // reads the KV cache (else a recurrent layer or none)
};

struct SimModel {
  std::string name;
  std::string arch;  // general.architecture: llama.cpp's decode graph has its own kernels per layer
  int32_t n_layer = 0, n_expert = 0, top_k = 0;
  std::vector<SimLayer> layers;      // (n_layer)
  std::vector<TypedBytes> head;      // output norm + lm head, read once per step
  uint64_t kv_bytes_per_position = 0;  // K and V of every attention layer for one position
  // The plan's input as the session sizes it (runtime/engine: placement_input), budget left 0.
  PlacementInput placement;
};

enum class SimRoutingMode { uniform, locality, trace, profile };
struct SimRouting {
  SimRoutingMode mode = SimRoutingMode::locality;
  std::string path;  // trace: a routing trace; locality: optional trace whose statistics set it;
                     // profile: an activation profile (ExpertProfile JSON)
  uint64_t seed = 1;
};
// "uniform" | "locality" | "locality:FILE" | "trace:FILE" | "profile:FILE" (invalid_arg otherwise).
SimRouting parse_sim_routing(const std::string& s, uint64_t seed = 1);
std::string sim_routing_name(const SimRouting& r);

struct SimOptions {
  uint64_t budget_bytes = 0;  // --vram (0: every expert resident)
  int64_t n_prompt = 512;     // prefill tokens (0: none)
  int64_t n_decode = 64;      // decoded tokens
  int32_t n_batch = 512;
  ColdMode cold = ColdMode::auto_;
  EvictionPolicy policy = EvictionPolicy::lrfu;
  int32_t prefetch = 0;  // predictor depth (0: no prediction prefetch)
  bool admit = true;
  int32_t prefetch_in_flight = 8;
  SimRouting routing;
  std::string trace_path;  // a Perfetto trace in virtual time ("" = none)
};

// Where the time of one decoded token goes (µs, means over the decoded tokens).
struct SimTokenTime {
  double total_us = 0;
  double gpu_dense_us = 0, gpu_expert_us = 0, launch_us = 0;
  double cache_scan_us = 0;  // the expert cache's victim scans on the host (model revision 8)
  double cpu_expert_us = 0;  // CPU expert work (overlaps the GPU)
  double link_us = 0;        // busy time of the host→device link
  std::array<double, kWaitCauses> gpu_wait_us{};  // compute stream idle, by cause (WaitCause)
};

enum class SimStrategy { ferry, llamacpp_fit, llamacpp_ncmoe };
inline constexpr std::array<Named<SimStrategy>, 3> kSimStrategies{{{"ferry", SimStrategy::ferry},
                                                                   {"llamacpp_fit", SimStrategy::llamacpp_fit},
                                                                   {"llamacpp_ncmoe", SimStrategy::llamacpp_ncmoe}}};

struct SimResult {
  SimStrategy strategy = SimStrategy::ferry;
  const char* strategy_name() const { return name_of(kSimStrategies, strategy); }
  bool fits = true;
  std::string note;      // why it does not fit, or what was chosen (e.g. "-ncmoe 14")
  double pp_tps = 0, tg_tps = 0;
  SimTokenTime token;    // decode
  double prefill_us = 0;
  // --stats figures (decode and prefill together, as --stats counts them)
  uint64_t tokens = 0, hits = 0, misses = 0, cpu_experts = 0, copy_now = 0, streamed = 0,
           waited = 0;
  uint64_t inflight = 0;  // of the misses: a prefetch was still in flight
  uint64_t h2d_demand_bytes = 0;    // copy-now and streaming copies
  uint64_t h2d_prefetch_bytes = 0;  // prefetches and admissions
  uint64_t decode_tokens = 0, decode_hits = 0, decode_uses = 0, decode_h2d_bytes = 0;
  PrefetchCounters prefetch;
  int32_t n_slots = 0;
  double experts_on_gpu_fraction = 0;
  int32_t n_cpu_moe = -1;  // llamacpp_ncmoe: the N chosen
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 1.0; }
  double decode_hit_rate() const { return decode_uses ? double(decode_hits) / decode_uses : 1.0; }
  double h2d_per_token() const {
    return decode_tokens ? double(decode_h2d_bytes) / double(decode_tokens) : 0.0;
  }
};

// The plan the engine would make for this budget (the same PlacementInput and make_plan).
Plan sim_plan(const SimModel& m, uint64_t budget_bytes);

// The smallest budget whose plan holds at least n_slots expert slots (ErrorKind::invalid_arg
// when n_slots exceeds the model's experts).
uint64_t sim_budget_for_slots(const SimModel& m, int64_t n_slots);

// Ferry's offload engine (or, when every expert fits, its resident path).
SimResult simulate_ferry(const SimModel& m, const SimRates& r, const SimOptions& o);

// The --stats-like text of a result (every figure an estimate of the simulator).
std::string sim_result_text(const SimResult& s);

}  // namespace ferry
