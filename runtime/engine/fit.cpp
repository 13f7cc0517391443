#include "runtime/engine/fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

uint64_t all_experts(const PlacementInput& p) {
  return std::accumulate(p.layer_expert_bytes.begin(), p.layer_expert_bytes.end(), uint64_t{0}) *
         static_cast<uint64_t>(p.n_expert);
}

// What a step cannot do without: the least budget the offload placement accepts — the dense part,
// the session's state, the workspaces, the engine's step buffers and prefill staging slots, and
// one layer's top-k experts on the card — so that a budget the fit accepts, the plan accepts too.
uint64_t fixed_part(const PlacementInput& p) { return offload_min_budget_bytes(p); }

// Every expert resident (no offload engine: no step buffers, no staging).
uint64_t resident_need(const PlacementInput& p) {
  return p.dense_bytes + p.kv_bytes + p.state_bytes + p.workspace_bytes + all_experts(p);
}

// The model runs in the budget: resident, or offloaded.
bool runs_in(const PlacementInput& p, uint64_t budget) {
  return resident_need(p) <= budget || fixed_part(p) <= budget;
}

}  // namespace

CardBudget fit_budget(uint64_t free_bytes, const FitSettings& s) {
  if (free_bytes <= s.target_bytes)
    fail(ErrorKind::budget,
         "fit: the card has {} free, no more than the {} the fit leaves free (-fitt/--fit-target MiB): "
         "free device memory (close other programs), lower -fitt, or use --device cpu",
         format_size(free_bytes), format_size(s.target_bytes));
  return CardBudget{free_bytes, s.target_bytes, free_bytes - s.target_bytes};
}

DeviceFit fit_to_device(const SizesAt& sizes, const CardBudget& card, const FitSettings& s, int64_t n_ctx,
                        int64_t default_ctx) {
  DeviceFit f;
  f.free_bytes = card.free_bytes;
  f.margin_bytes = card.margin_bytes;
  f.budget_bytes = card.budget_bytes;
  const bool user_ctx = n_ctx > 0;
  f.n_ctx_asked = user_ctx ? n_ctx : default_ctx;
  f.n_ctx = f.n_ctx_asked;
  f.sizes = sizes(f.n_ctx);
  // Halve the default context while the model runs neither resident nor offloaded (never below
  // --fit-ctx, never a -c).
  while (!user_ctx && !runs_in(f.sizes, f.budget_bytes) && f.n_ctx / 2 >= s.min_ctx) {
    f.n_ctx /= 2;
    f.sizes = sizes(f.n_ctx);
  }
  f.expert_bytes = all_experts(f.sizes);
  f.fixed_bytes = fixed_part(f.sizes);
  f.need_bytes = resident_need(f.sizes);
  if (!runs_in(f.sizes, f.budget_bytes))
    fail(ErrorKind::budget,
         "fit: {} free on the card − {} margin = {} cannot hold the fixed part of {} at -c {} ({}: dense "
         "weights {}, KV cache {}, recurrent state {}, workspace {}, step buffers, staging and one "
         "layer's top-{} experts){} a smaller model or quantization, --device cpu, or a lower -fitt",
         format_size(f.free_bytes), format_size(f.margin_bytes), format_size(f.budget_bytes), f.sizes.model,
         f.n_ctx, format_size(f.fixed_bytes), format_size(f.sizes.dense_bytes), format_size(f.sizes.kv_bytes),
         format_size(f.sizes.state_bytes), format_size(f.sizes.workspace_bytes), f.sizes.n_expert_used,
         user_ctx ? ": use a smaller -c," : fmt::format(", even at --fit-ctx {}: use", s.min_ctx));
  f.offload = f.need_bytes > f.budget_bytes;
  return f;
}

std::string fit_summary(const DeviceFit& f, const std::string& device_name) {
  std::string s = fmt::format("fit: {}: {} free − {} margin = {} budget; the model needs {} with -c {}", device_name,
                              format_size(f.free_bytes), format_size(f.margin_bytes), format_size(f.budget_bytes),
                              format_size(f.need_bytes), f.n_ctx);
  if (f.n_ctx != f.n_ctx_asked) s += fmt::format(" (shrunk from {} to fit)", f.n_ctx_asked);
  if (!f.offload) return s + ": every expert resident";
  const uint64_t room = f.budget_bytes - std::min(f.budget_bytes, f.need_bytes - f.expert_bytes);
  const double share = f.expert_bytes ? static_cast<double>(std::min(room, f.expert_bytes)) / f.expert_bytes : 0.0;
  return s + fmt::format(": offloading — about {:.0f}% of the {} of experts fit on the card, the rest stay in "
                         "host memory (as --vram {}M)",
                         100.0 * share, format_size(f.expert_bytes), f.budget_bytes >> 20);
}

}  // namespace ferry
