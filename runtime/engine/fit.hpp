#pragma once
// Zero-flag fitting to a real card (llama.cpp's --fit, done per expert): with --device cuda (or
// auto finding a GPU) and no --vram, the device budget is the card's free memory minus a margin
// (-fitt/--fit-target MiB, llama.cpp's default 1024: what cuBLAS, the CUDA context's growth and
// other programs may still take). When the whole model with its context's KV cache, recurrent
// state and workspace fits in it, every expert is resident; otherwise the offload engine runs
// with that budget and keeps the hottest experts in it. When even the fixed part — the dense
// weights, KV, state, workspace and one layer's top-k experts (what a step must hold) — does not
// fit, the default context is halved first, as llama.cpp's fit shrinks its context, down to
// --fit-ctx; a context the user set (-c) is never changed. docs/options.md describes the flags.
#include <cstdint>
#include <functional>
#include <string>

#include "offload/offload.hpp"

namespace ferry {

struct FitSettings {
  bool enabled = true;                    // --fit on|off
  uint64_t target_bytes = 1024ull << 20;  // -fitt/--fit-target MiB: left free on the card
  int64_t min_ctx = 512;                  // -fitc/--fit-ctx: the smallest default context
};

struct DeviceFit {
  uint64_t free_bytes = 0, margin_bytes = 0;
  uint64_t budget_bytes = 0;  // free − margin: everything Ferry allocates on the card
  uint64_t need_bytes = 0;    // every expert resident with this context
  uint64_t fixed_bytes = 0;   // the least budget the offload plan accepts (offload_min_budget_bytes)
  uint64_t expert_bytes = 0;  // all routed experts
  int64_t n_ctx = 0;          // the context the session gets
  int64_t n_ctx_asked = 0;    // before shrinking (the default, or -c)
  bool offload = false;       // the experts do not all fit: the offload engine runs
  PlacementInput sizes;       // the model's sizes at n_ctx
};

// The placement input (dense, experts, KV, state, workspace) of the model for a context.
using SizesAt = std::function<PlacementInput(int64_t n_ctx)>;

// The card's memory as the fit splits it, computed once per load: the device is made with the
// budget before the model's sizes (its workspaces) are known, and the fit splits the same budget.
struct CardBudget {
  uint64_t free_bytes = 0, margin_bytes = 0;
  uint64_t budget_bytes = 0;  // free − margin
};

// free − margin; ErrorKind::budget when the card has no more than the margin free.
CardBudget fit_budget(uint64_t free_bytes, const FitSettings& s);

// Fits the model to the card's budget. n_ctx: the user's -c, never changed (0: default_ctx, which
// may shrink). ErrorKind::budget, naming the sizes and what to do, when nothing fits.
DeviceFit fit_to_device(const SizesAt& sizes, const CardBudget& card, const FitSettings& s, int64_t n_ctx,
                        int64_t default_ctx);

// The one line `ferry run` prints: the card's free memory, the margin, and what stays on the host.
std::string fit_summary(const DeviceFit& f, const std::string& device_name);

}  // namespace ferry
