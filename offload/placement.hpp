#pragma once
// Placement: what lives in the VRAM budget. In order: dense weights (attention / DeltaNet, norms,
// routers, shared experts, embeddings, lm_head), the KV cache and recurrent state for the requested
// context, workspace (activations, two prefill staging slots), then as many routed expert slots as
// the rest holds (never more than there are experts). Architecture-free: the caller
// (runtime/cli/offload_args) turns a model config and its tensor table into these sizes.
//
// Slots come in size classes: all experts of a layer have one size (gate + up + down bytes), but
// mixed quantizations give layers different sizes (llama.cpp's Q4_K_M: Q6_K downs on some layers;
// APEX: Q6_K / Q5_K / IQ4_XS experts by layer). Each distinct size is a class, with its own region
// of the slot arena and slots of exactly that size, so a small expert never occupies a slot sized
// for a large one (docs/decisions/0004-offload-engine.md, "Slot size classes"). An expert of layer
// l only ever goes into a slot of l's class.
//
// The initial hot set fills the slots and fixes each class's slot count: from an activation profile
// (the most used experts across all layers, ranked by their share of their own layer's selections,
// taken greedily while the budget lasts), else uniformly (the same fraction of every layer's
// experts; which experts is arbitrary without data).
#include <cstdint>
#include <string>
#include <vector>

#include "offload/expert_cache.hpp"
#include "offload/offload.hpp"
#include "runtime/moe/placement_profile.hpp"

namespace ferry {


// The slots of one expert size. Slots are numbered class by class: class c owns slots
// [first_slot, first_slot + n_slots), packed back to back from offset_bytes in the slot arena.
struct SlotClass {
  uint64_t expert_bytes = 0;    // one expert of these layers, = the slot size (no padding)
  std::vector<int32_t> layers;  // layers whose experts have this size, ascending
  int32_t n_slots = 0;
  int32_t first_slot = 0;
  uint64_t offset_bytes = 0;  // 16-byte aligned (the device kernels' loads)

  uint64_t bytes() const { return expert_bytes * static_cast<uint64_t>(n_slots); }
};

struct Plan {
  PlacementInput in;
  std::vector<SlotClass> classes;         // largest expert size first
  std::vector<int32_t> class_of_layer;    // (n_layer) index into classes
  uint64_t staging_slot_bytes = 0;        // the largest expert, rounded up to 256
  uint64_t staging_bytes = 0;             // two staging slots for prefill double buffering
  int32_t n_slots = 0;                    // Σ classes' n_slots
  std::vector<std::vector<int32_t>> hot;  // (n_layer) experts loaded into slots at start

  int32_t class_of_slot(int32_t slot) const;
  uint64_t slot_offset(int32_t slot) const;  // byte offset of a slot in the slot arena
  uint64_t slots_bytes() const;              // the slot arena: end of the last class's region
  // The cache's partition: a slot takes only experts of its class's layers.
  SlotPartition slot_partition() const;
  uint64_t fixed_bytes() const;  // dense + kv + state + workspace + step + staging
  // The least budget this input can run under: the fixed part and one slot of the largest class
  // for each of a step's top-k experts (make_plan refuses a smaller budget).
  uint64_t min_budget_bytes() const;
  uint64_t total_bytes() const;  // fixed + the slot arena (one allocation, 256-byte units)
  int64_t total_experts() const { return int64_t{in.n_layer} * in.n_expert; }
  double resident_fraction() const;
  std::string hot_source = "uniform";  // "uniform" | "profile FILE" | "all"
};

// ErrorKind::budget when the fixed part plus top_k slots of the largest expert does not fit; the
// message says how much is missing and what to change (-c, -ctk/-ctv, --vram).
// ErrorKind::invalid_arg when a profile's shape does not match the model.
Plan make_plan(const PlacementInput& in, const ExpertProfile* profile = nullptr,
               const std::string& profile_name = "");

// Bytes per component, slots per class (bytes per slot, count, layers), experts resident per
// layer, % of experts resident.
std::string plan_text(const Plan& p);
std::string plan_json(const Plan& p);

}  // namespace ferry
