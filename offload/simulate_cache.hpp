#pragma once
// Expert caches of other systems, in front of host-resident experts, on the simulated routing
// (docs/simulator.md). Two published designs are compared with the simulator:
//   - a STATIC per-layer set (thecodacus/llama.cpp#5, "MoE expert cache"): the N experts of each
//     layer routed to most often in a routing profile captured once per model (its trace tool,
//     a representative prompt, -n 512) stay in VRAM; nothing is copied while decoding;
//   - a per-layer LRU of PROJECTION slots (kekzl/imp#1374): a slot holds one of an expert's
//     gate, up or down projection (3 per expert), each layer its own slots, starting empty, used
//     in the order the engine's code uses them (model revision 12, below).
#include <cstdint>
#include <vector>

#include "offload/simulate.hpp"

namespace ferry {

class SimRouter;

// (n_layer, n_expert) membership: the slots_per_layer experts of each layer that `router` routes
// to most often over its next profile_tokens tokens (ties to the lower id), as the fork's profile
// picks them. The router is left after the profile: what it draws next is another prompt's
// routing of the same model.
std::vector<std::vector<uint8_t>> static_cache_sets(SimRouter& router, int32_t n_layer,
                                                    int32_t n_expert, int32_t top_k,
                                                    int32_t slots_per_layer, int64_t profile_tokens);

struct ProjectionLruResult {
  double decode_hit_rate = 0;  // over the decoded tokens' projection uses (the compared figure)
  double all_hit_rate = 0;     // the prompt's uses counted too
  uint64_t decode_uses = 0;
  uint64_t prompt_uses = 0;    // 0 where the prompt's batch bypasses the cache
};

// A cold per-layer LRU of slots_per_layer projection slots, one LRU tick per use, inserted at a
// miss, in kekzl/imp's order (its source, read for model revision 12):
//   - a decoded token (src/exec/executor_forward_moe_batch.cu, run_moe_decode_fast, host-resident
//     experts): the routing is copied to the host, then every routed expert's GATE is looked up
//     (in routing order), then every UP, then every DOWN (get_or_load per projection), before the
//     fused kernels run on the slots;
//   - the n_prompt-token prompt, one batch (src/exec/executor_forward_moe_legacy.cu,
//     run_moe_legacy_fallback_): the cache is used only when 3 x the experts the batch routes to
//     fit the layer's slots (else a staging buffer, the cache untouched); then by expert id:
//     gate and up of each expert, then the down of each.
// No prefetch (imp's moe.prefetch_top_k is 0 by default). ErrorKind::invalid_arg when
// slots_per_layer < 1.
ProjectionLruResult projection_lru_hit_rate(const SimModel& m, const SimRouting& routing,
                                            int32_t slots_per_layer, int64_t n_prompt,
                                            int64_t n_decode);

}  // namespace ferry
