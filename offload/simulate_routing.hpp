#pragma once
// Routing for the simulator: one token's expert ids per layer, drawn as the routing override
// (routing.hpp) draws them for the same mode and seed — per-layer generators seeded
// seed · 1000003 + layer, a trace replayed per layer token by token (from the start again when it
// runs out) — plus `profile:FILE`: ids drawn without replacement from a recorded activation
// profile's per-layer frequencies (runtime/moe/placement_profile.hpp).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/moe/placement_profile.hpp"
#include "runtime/moe/routing.hpp"
#include "runtime/moe/routing_trace.hpp"
#include "offload/simulate.hpp"

namespace ferry {

class SimRouter {
 public:
  // ErrorKind::invalid_arg when a trace's or profile's shape disagrees with the model's.
  SimRouter(const SimRouting& r, int32_t n_layer, int32_t n_expert, int32_t top_k);
  void next(int32_t layer, int32_t* ids);  // top_k distinct ids of the next token at `layer`
  // The trace being replayed (trace mode), whose records give the run's step structure.
  const RoutingTrace* trace() const { return trace_ ? &*trace_ : nullptr; }

 private:
  SimRouting r_;
  int32_t n_layer_, n_expert_, top_k_;
  std::vector<RoutingRng> rng_;                            // [layer] uniform, profile
  std::vector<std::unique_ptr<LocalityRouting>> locality_;  // [layer]
  std::optional<RoutingTrace> trace_;
  std::vector<int64_t> pos_;             // [layer] next trace token
  std::vector<std::vector<double>> cdf_;  // [layer] (n_expert) profile frequencies, cumulative
};

}  // namespace ferry
