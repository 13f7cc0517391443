#pragma once
// Placement: what lives in the VRAM budget. In order: dense weights (attention / DeltaNet, norms,
// routers, shared experts, embeddings, lm_head), the KV cache and recurrent state for the requested
// context, workspace (activations, the slot table, two prefill staging slots), then as many routed
// expert slots as the rest holds (never more than there are experts). Architecture-free: the
// caller (runtime/cli/offload_args) turns a model config and its tensor table into these sizes.
//
// The initial hot set fills the slots: from an activation profile (the most used experts, ranked
// by their share of their own layer's selections, so every layer counts equally), else uniformly
// (each layer gets an equal share of slots; which experts is arbitrary without data).
#include <cstdint>
#include <string>
#include <vector>

#include "offload/placement_profile.hpp"

namespace ferry {

struct PlacementInput {
  std::string model;    // for messages
  int32_t n_layer = 0;  // layers with routed experts
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  uint64_t expert_bytes = 0;  // one expert's gate + up + down (largest over layers)
  uint64_t dense_bytes = 0;   // everything but routed experts
  uint64_t kv_bytes = 0;      // attention KV cache for n_ctx
  uint64_t state_bytes = 0;   // recurrent (DeltaNet) state
  uint64_t workspace_bytes = 0;
  // The offload device flow's per-step buffers (table and routing upload, CPU expert sum, expert
  // kernel scratch) for the largest batch: left free, allocated by the executor as steps need
  // them. 0 for the exact sim flow (offload/offload_executor.hpp: device_flow_step_bytes).
  uint64_t step_bytes = 0;
  int64_t n_ctx = 0;          // for messages
  std::string kv_types;       // "f16/f16", for messages
  uint64_t budget_bytes = 0;  // 0 = no limit: every expert gets a slot
};

struct Plan {
  PlacementInput in;
  uint64_t slot_bytes = 0;     // expert_bytes rounded up to the device alignment (256)
  uint64_t staging_bytes = 0;  // two slots for prefill double buffering (part of workspace)
  uint64_t table_bytes = 0;    // device-side slot table
  int32_t n_slots = 0;
  std::vector<std::vector<int32_t>> hot;  // (n_layer) experts loaded into slots at start

  uint64_t fixed_bytes() const;  // dense + kv + state + workspace + step + staging + table
  uint64_t slots_bytes() const { return slot_bytes * static_cast<uint64_t>(n_slots); }
  uint64_t total_bytes() const { return fixed_bytes() + slots_bytes(); }
  int64_t total_experts() const { return int64_t{in.n_layer} * in.n_expert; }
  double resident_fraction() const;
  std::string hot_source = "uniform";  // "uniform" | "profile FILE" | "all"
};

// ErrorKind::budget when the fixed part plus the minimum of top_k slots does not fit; the message
// says how much is missing and what to change (-c, -ctk/-ctv, --vram). ErrorKind::invalid_arg when
// a profile's shape does not match the model.
Plan make_plan(const PlacementInput& in, const ExpertProfile* profile = nullptr,
               const std::string& profile_name = "");

// Bytes per component, slot count, experts resident per layer, % of experts resident.
std::string plan_text(const Plan& p);
std::string plan_json(const Plan& p);

}  // namespace ferry
