#include "offload/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

constexpr uint64_t kAlign = 256;     // Device::alloc charges in 256-byte units
constexpr uint64_t kSlotAlign = 16;  // class regions: the device kernels read with 16-byte loads
uint64_t align_up(uint64_t n, uint64_t a = kAlign) {
  return (n + a - 1) / a * a;
}

// Expert ids spread over the layer (which ones is arbitrary without a profile).
std::vector<std::vector<int32_t>> uniform_hot(int32_t E, const std::vector<int64_t>& counts) {
  std::vector<std::vector<int32_t>> hot(counts.size());
  for (size_t l = 0; l < counts.size(); ++l) {
    const int64_t n = std::min<int64_t>(counts[l], E);
    for (int64_t i = 0; i < n; ++i) hot[l].push_back(static_cast<int32_t>(i * E / n));
  }
  return hot;
}

// The same fraction of every layer's experts: k slots per layer for the largest k that fits, then
// one more for layers in order while the rest lasts (layers differ by at most one slot).
std::vector<int64_t> uniform_counts(const PlacementInput& in, uint64_t avail) {
  const uint64_t one_each =
      std::accumulate(in.layer_expert_bytes.begin(), in.layer_expert_bytes.end(), uint64_t{0});
  const auto k = static_cast<int64_t>(
      std::min<uint64_t>(static_cast<uint64_t>(in.n_expert), avail / one_each));
  std::vector<int64_t> counts(static_cast<size_t>(in.n_layer), k);
  avail -= static_cast<uint64_t>(k) * one_each;
  if (k < in.n_expert)
    for (size_t l = 0; l < counts.size(); ++l)
      if (in.layer_expert_bytes[l] <= avail) {
        ++counts[l];
        avail -= in.layer_expert_bytes[l];
      }
  return counts;
}

// A resident expert saves its own bytes of transfer (or of host reads) on every use, so a byte of
// slot is worth its expert's use frequency whatever the expert's size: holding the most used
// experts first is the greedy by value per byte of this knapsack, optimal up to the first expert
// that no longer fits; less used but smaller experts may still fill what is left. Frequency is an
// expert's share of its own layer's selections (every layer makes top_k per token, so shares
// compare across layers, and a profile recorded over few tokens in some layer still counts fully).
std::vector<std::vector<int32_t>> profile_hot(const ExpertProfile& p, const PlacementInput& in,
                                              uint64_t avail) {
  struct Cand {
    double share;
    int32_t layer, expert;
  };
  std::vector<Cand> c;
  for (int32_t l = 0; l < p.n_layer(); ++l) {
    uint64_t total = 0;
    for (int32_t e = 0; e < p.n_expert(); ++e) total += p.count(l, e);
    for (int32_t e = 0; e < p.n_expert(); ++e)
      c.push_back(
          {total ? static_cast<double>(p.count(l, e)) / static_cast<double>(total) : 0.0, l, e});
  }
  // Highest share first; ties (unused experts) spread round-robin over layers by expert id.
  std::stable_sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) {
    if (a.share != b.share) return a.share > b.share;
    return a.expert != b.expert ? a.expert < b.expert : a.layer < b.layer;
  });
  const uint64_t smallest =
      *std::min_element(in.layer_expert_bytes.begin(), in.layer_expert_bytes.end());
  std::vector<std::vector<int32_t>> hot(static_cast<size_t>(p.n_layer()));
  for (const Cand& x : c) {
    if (avail < smallest) break;
    const uint64_t b = in.layer_expert_bytes[static_cast<size_t>(x.layer)];
    if (b > avail) continue;
    hot[static_cast<size_t>(x.layer)].push_back(x.expert);
    avail -= b;
  }
  for (auto& h : hot) std::sort(h.begin(), h.end());
  return hot;
}

// "0,3,6-7"
std::string layer_ranges(const std::vector<int32_t>& layers) {
  std::string s;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    s += fmt::format("{}{}", s.empty() ? "" : ",", layers[i]);
    if (j > i) s += fmt::format("-{}", layers[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace

int32_t Plan::class_of_slot(int32_t slot) const {
  for (size_t c = 0; c < classes.size(); ++c)
    if (slot >= classes[c].first_slot && slot < classes[c].first_slot + classes[c].n_slots)
      return static_cast<int32_t>(c);
  fail(ErrorKind::internal, "offload plan: slot {} of {}", slot, n_slots);
}

uint64_t Plan::slot_offset(int32_t slot) const {
  const SlotClass& c = classes[static_cast<size_t>(class_of_slot(slot))];
  return c.offset_bytes + static_cast<uint64_t>(slot - c.first_slot) * c.expert_bytes;
}

uint64_t Plan::slots_bytes() const {
  return classes.empty() ? 0 : classes.back().offset_bytes + classes.back().bytes();
}

SlotPartition Plan::slot_partition() const {
  SlotPartition s;
  s.layer_group = class_of_layer;
  for (const SlotClass& c : classes) s.group_slots.push_back(c.n_slots);
  return s;
}

uint64_t Plan::fixed_bytes() const {
  // Each part is one device allocation (or a reservation), rounded up to the device alignment.
  return align_up(in.dense_bytes) + align_up(in.kv_bytes) + align_up(in.state_bytes) +
         align_up(in.workspace_bytes) + align_up(in.step_bytes) + staging_bytes;
}

uint64_t Plan::min_budget_bytes() const {
  const uint64_t largest = classes.empty() ? 0 : classes.front().expert_bytes;  // largest first
  return fixed_bytes() + align_up(static_cast<uint64_t>(in.n_expert_used) * largest);
}

uint64_t Plan::total_bytes() const {
  return fixed_bytes() + align_up(slots_bytes());
}

double Plan::resident_fraction() const {
  return total_experts() ? static_cast<double>(n_slots) / static_cast<double>(total_experts())
                         : 0.0;
}

Plan make_plan(const PlacementInput& in, const ExpertProfile* profile,
               const std::string& profile_name) {
  const bool sized = static_cast<int32_t>(in.layer_expert_bytes.size()) == in.n_layer &&
                     std::none_of(in.layer_expert_bytes.begin(), in.layer_expert_bytes.end(),
                                  [](uint64_t b) { return b == 0; });
  if (in.n_layer <= 0 || in.n_expert <= 0 || in.n_expert_used <= 0 || !sized)
    fail(ErrorKind::invalid_arg,
         "placement for {}: {} layers, {} experts ({} used), expert sizes given for {} layers (all "
         "must be > 0)",
         in.model, in.n_layer, in.n_expert, in.n_expert_used, in.layer_expert_bytes.size());
  Plan p;
  p.in = in;
  // Size classes: the distinct per-layer expert sizes, largest first.
  std::vector<uint64_t> sizes = in.layer_expert_bytes;
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  bool unaligned = false;
  for (uint64_t b : sizes) {
    p.classes.push_back(SlotClass{b, {}, 0, 0, 0});
    unaligned = unaligned || b % kSlotAlign != 0;
  }
  for (int32_t l = 0; l < in.n_layer; ++l) {
    const auto c =
        std::find(sizes.begin(), sizes.end(), in.layer_expert_bytes[static_cast<size_t>(l)]) -
        sizes.begin();
    p.class_of_layer.push_back(static_cast<int32_t>(c));
    p.classes[static_cast<size_t>(c)].layers.push_back(l);
  }
  p.staging_slot_bytes = align_up(sizes.front());
  p.staging_bytes = 2 * p.staging_slot_bytes;

  const int64_t total = p.total_experts();
  uint64_t all_bytes = 0;
  for (uint64_t b : in.layer_expert_bytes) all_bytes += b * static_cast<uint64_t>(in.n_expert);
  std::vector<int64_t> counts(static_cast<size_t>(in.n_layer), in.n_expert);
  uint64_t avail = UINT64_MAX;
  if (in.budget_bytes != 0) {
    const auto min_slots = static_cast<uint64_t>(in.n_expert_used);
    const uint64_t need = p.min_budget_bytes();
    if (need > in.budget_bytes)
      fail(ErrorKind::budget,
           "--vram {} is too small for {}: it needs {} (missing {}): dense weights {}, KV cache {} "
           "(-c {}, {}), recurrent state {}, workspace {}, at least {} expert slots of {}. Use a "
           "smaller -c, a smaller KV type (-ctk/-ctv), or a larger --vram",
           format_size(in.budget_bytes), in.model, format_size(need),
           format_size(need - in.budget_bytes), format_size(in.dense_bytes),
           format_size(in.kv_bytes), in.n_ctx, in.kv_types, format_size(in.state_bytes),
           format_size(in.workspace_bytes + in.step_bytes + p.staging_bytes), min_slots,
           format_size(sizes.front()));
    // The arena is one allocation in 256-byte units; after a region of a size that is not a
    // 16-byte multiple the next one needs up to 16 bytes of alignment (no real file has such sizes).
    avail = (in.budget_bytes - p.fixed_bytes()) / kAlign * kAlign;
    if (unaligned) avail -= std::min<uint64_t>(avail, kSlotAlign * (sizes.size() - 1));
  }
  if (avail >= all_bytes) {
    p.hot = uniform_hot(in.n_expert, counts);
    p.hot_source = "all";
  } else if (profile) {
    if (profile->n_layer() != in.n_layer || profile->n_expert() != in.n_expert)
      fail(ErrorKind::invalid_arg, "profile {} is for {} layers × {} experts, {} has {} × {}",
           profile_name, profile->n_layer(), profile->n_expert(), in.model, in.n_layer,
           in.n_expert);
    p.hot = profile_hot(*profile, in, avail);
    p.hot_source = "profile " + profile_name;
  } else {
    p.hot = uniform_hot(in.n_expert, uniform_counts(in, avail));
    p.hot_source = "uniform";
  }
  // Each class's slots: as many as its layers' hot experts; regions back to back.
  uint64_t offset = 0;
  for (SlotClass& c : p.classes) {
    for (int32_t l : c.layers)
      c.n_slots += static_cast<int32_t>(p.hot[static_cast<size_t>(l)].size());
    c.first_slot = p.n_slots;
    c.offset_bytes = align_up(offset, kSlotAlign);
    offset = c.offset_bytes + c.bytes();
    p.n_slots += c.n_slots;
  }
  if (p.n_slots > total || (in.budget_bytes && p.total_bytes() > in.budget_bytes))
    fail(ErrorKind::internal, "placement for {}: {} slots in {} exceed the budget {}", in.model,
         p.n_slots, format_size(p.total_bytes()), format_size(in.budget_bytes));
  return p;
}

std::string plan_text(const Plan& p) {
  std::string s =
      fmt::format("offload plan for {} (budget {}):\n", p.in.model,
                  p.in.budget_bytes ? format_size(p.in.budget_bytes) : std::string("unlimited"));
  const auto line = [&](const std::string& what, uint64_t b) {
    s += fmt::format("  {:<26} {:>12}\n", what, format_size(b));
  };
  line("dense weights", p.in.dense_bytes);
  line(fmt::format("KV cache (-c {}, {})", p.in.n_ctx, p.in.kv_types), p.in.kv_bytes);
  line("recurrent state", p.in.state_bytes);
  line("workspace", p.in.workspace_bytes);
  if (p.in.step_bytes) line("offload step buffers", p.in.step_bytes);
  line("prefill staging (2 slots)", p.staging_bytes);
  line(fmt::format("expert slots ({})", p.n_slots), p.slots_bytes());
  for (const SlotClass& c : p.classes)
    s += fmt::format("    {:>5} × {:>10}  layers {}\n", c.n_slots, format_size(c.expert_bytes),
                     layer_ranges(c.layers));
  line("total", p.total_bytes());
  s += fmt::format("  experts resident: {} of {} ({:.1f}%), initial set: {}\n  per layer:",
                   p.n_slots, p.total_experts(), 100.0 * p.resident_fraction(), p.hot_source);
  for (size_t l = 0; l < p.hot.size(); ++l) s += fmt::format(" {}", p.hot[l].size());
  s += "\n";
  return s;
}

std::string plan_json(const Plan& p) {
  nlohmann::json j;
  j["model"] = p.in.model;
  j["budget_bytes"] = p.in.budget_bytes;
  j["dense_bytes"] = p.in.dense_bytes;
  j["kv_bytes"] = p.in.kv_bytes;
  j["n_ctx"] = p.in.n_ctx;
  j["kv_types"] = p.in.kv_types;
  j["state_bytes"] = p.in.state_bytes;
  j["workspace_bytes"] = p.in.workspace_bytes;
  j["step_bytes"] = p.in.step_bytes;
  j["staging_bytes"] = p.staging_bytes;
  j["staging_slot_bytes"] = p.staging_slot_bytes;
  j["n_slots"] = p.n_slots;
  j["slots_bytes"] = p.slots_bytes();
  nlohmann::json classes = nlohmann::json::array();
  for (const SlotClass& c : p.classes)
    classes.push_back({{"expert_bytes", c.expert_bytes},
                       {"layers", c.layers},
                       {"n_slots", c.n_slots},
                       {"first_slot", c.first_slot},
                       {"offset_bytes", c.offset_bytes}});
  j["classes"] = classes;
  j["total_bytes"] = p.total_bytes();
  j["n_layer"] = p.in.n_layer;
  j["n_expert"] = p.in.n_expert;
  j["resident_fraction"] = p.resident_fraction();
  j["hot_source"] = p.hot_source;
  j["hot"] = p.hot;
  return j.dump(1) + "\n";
}

}  // namespace ferry
