#include "offload/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

constexpr uint64_t kAlign = 256;  // Device::alloc charges in 256-byte units
uint64_t align_up(uint64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

std::vector<std::vector<int32_t>> uniform_hot(int32_t L, int32_t E, int64_t slots) {
  std::vector<std::vector<int32_t>> hot(static_cast<size_t>(L));
  for (int32_t l = 0; l < L; ++l) {
    // Layers 0..r-1 get one extra slot when slots do not divide evenly.
    const int64_t n = slots / L + (l < slots % L ? 1 : 0);
    for (int64_t i = 0; i < std::min<int64_t>(n, E); ++i)
      hot[static_cast<size_t>(l)].push_back(static_cast<int32_t>(i * E / std::min<int64_t>(n, E)));
  }
  return hot;
}

std::vector<std::vector<int32_t>> profile_hot(const ExpertProfile& p, int64_t slots) {
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
  std::vector<std::vector<int32_t>> hot(static_cast<size_t>(p.n_layer()));
  for (int64_t i = 0; i < std::min<int64_t>(slots, static_cast<int64_t>(c.size())); ++i)
    hot[static_cast<size_t>(c[static_cast<size_t>(i)].layer)].push_back(
        c[static_cast<size_t>(i)].expert);
  for (auto& h : hot) std::sort(h.begin(), h.end());
  return hot;
}

}  // namespace

uint64_t Plan::fixed_bytes() const {
  // Each part is one device allocation (or a reservation), rounded up to the device alignment.
  return align_up(in.dense_bytes) + align_up(in.kv_bytes) + align_up(in.state_bytes) + align_up(in.workspace_bytes) +
         align_up(in.step_bytes) + staging_bytes + table_bytes;
}

double Plan::resident_fraction() const {
  return total_experts() ? static_cast<double>(n_slots) / static_cast<double>(total_experts())
                         : 0.0;
}

Plan make_plan(const PlacementInput& in, const ExpertProfile* profile,
               const std::string& profile_name) {
  if (in.n_layer <= 0 || in.n_expert <= 0 || in.n_expert_used <= 0 || in.expert_bytes == 0)
    fail(ErrorKind::invalid_arg,
         "placement for {}: {} layers, {} experts ({} used), {} B per expert", in.model, in.n_layer,
         in.n_expert, in.n_expert_used, in.expert_bytes);
  Plan p;
  p.in = in;
  p.slot_bytes = align_up(in.expert_bytes);
  p.staging_bytes = 2 * p.slot_bytes;
  const int64_t total = p.total_experts();
  // Device slot table: three pointers per slot plus one int per (layer, expert) mapping to a slot.
  p.table_bytes = align_up(static_cast<uint64_t>(total) * 3 * sizeof(void*)) +
                  align_up(static_cast<uint64_t>(total) * sizeof(int32_t));
  const auto min_slots = static_cast<int64_t>(in.n_expert_used);
  if (in.budget_bytes == 0) {
    p.n_slots = static_cast<int32_t>(total);
  } else {
    const uint64_t need = p.fixed_bytes() + static_cast<uint64_t>(min_slots) * p.slot_bytes;
    if (need > in.budget_bytes)
      fail(ErrorKind::budget,
           "--vram {} is too small for {}: it needs {} (missing {}): dense weights {}, KV cache {} "
           "(-c {}, "
           "{}), recurrent state {}, workspace {}, at least {} expert slots of {}. Use a smaller "
           "-c, a smaller "
           "KV type (-ctk/-ctv), or a larger --vram",
           format_size(in.budget_bytes), in.model, format_size(need),
           format_size(need - in.budget_bytes), format_size(in.dense_bytes),
           format_size(in.kv_bytes), in.n_ctx, in.kv_types, format_size(in.state_bytes),
           format_size(in.workspace_bytes + in.step_bytes + p.staging_bytes + p.table_bytes), min_slots,
           format_size(p.slot_bytes));
    p.n_slots = static_cast<int32_t>(std::min<uint64_t>(
        static_cast<uint64_t>(total), (in.budget_bytes - p.fixed_bytes()) / p.slot_bytes));
  }
  if (profile && p.n_slots < total) {
    if (profile->n_layer() != in.n_layer || profile->n_expert() != in.n_expert)
      fail(ErrorKind::invalid_arg, "profile {} is for {} layers × {} experts, {} has {} × {}",
           profile_name, profile->n_layer(), profile->n_expert(), in.model, in.n_layer,
           in.n_expert);
    p.hot = profile_hot(*profile, p.n_slots);
    p.hot_source = "profile " + profile_name;
  } else {
    p.hot = uniform_hot(in.n_layer, in.n_expert, p.n_slots);
    p.hot_source = p.n_slots == total ? "all" : "uniform";
  }
  return p;
}

std::string plan_text(const Plan& p) {
  std::string s =
      fmt::format("offload plan for {} (budget {}):\n", p.in.model,
                  p.in.budget_bytes ? format_size(p.in.budget_bytes) : std::string("unlimited"));
  const auto line = [&](const char* what, uint64_t b) {
    s += fmt::format("  {:<26} {:>12}\n", what, format_size(b));
  };
  line("dense weights", p.in.dense_bytes);
  line(fmt::format("KV cache (-c {}, {})", p.in.n_ctx, p.in.kv_types).c_str(), p.in.kv_bytes);
  line("recurrent state", p.in.state_bytes);
  line("workspace", p.in.workspace_bytes);
  if (p.in.step_bytes) line("offload step buffers", p.in.step_bytes);
  line("prefill staging (2 slots)", p.staging_bytes);
  line("slot table", p.table_bytes);
  line(fmt::format("expert slots ({} × {})", p.n_slots, format_size(p.slot_bytes)).c_str(),
       p.slots_bytes());
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
  j["table_bytes"] = p.table_bytes;
  j["slot_bytes"] = p.slot_bytes;
  j["n_slots"] = p.n_slots;
  j["slots_bytes"] = p.slots_bytes();
  j["total_bytes"] = p.total_bytes();
  j["n_layer"] = p.in.n_layer;
  j["n_expert"] = p.in.n_expert;
  j["resident_fraction"] = p.resident_fraction();
  j["hot_source"] = p.hot_source;
  j["hot"] = p.hot;
  return j.dump(1) + "\n";
}

}  // namespace ferry
