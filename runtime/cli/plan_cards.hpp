#pragma once
// The per-card answers of `ferry plan`: does the model fit, which share of its experts sits in
// VRAM, the largest context, and the simulator's estimates for Ferry and llama.cpp's fit and
// best -ncmoe on each of the card's plausible hosts (a band when there are several).
#include <string>
#include <vector>

#include "offload/simulate.hpp"
#include "offload/simulate_llamacpp.hpp"
#include "runtime/cli/plan_args.hpp"
#include "runtime/plan/plan_model.hpp"

namespace ferry::cli {

struct Estimate {
  bool fits = false;
  double tg = 0, tg_low = 0, tg_high = 0, pp = 0, pp_low = 0, pp_high = 0;
  double hit_rate = -1;  // ferry only
  int32_t n_cpu_moe = -1;  // llamacpp_ncmoe only
  std::string note;
};

struct CardRow {
  std::string gpu, gpu_name;
  std::vector<std::string> hosts;  // one, or the band's hosts
  uint64_t vram_bytes = 0, budget_bytes = 0;
  bool fits = false;               // Ferry can run it (the fixed part and top_k slots fit)
  double experts_on_gpu_fraction = 0;
  int64_t max_context = 0;         // estimate: the largest -c whose plan still fits
  Estimate ferry, llamacpp_fit, llamacpp_ncmoe;
  std::vector<SimResult> detail;   // the first host's results: ferry, fit, ncmoe
  Plan plan;                       // Ferry's plan (when it fits)

  // Ferry's estimate over the faster of llama.cpp's two (fit, best -ncmoe), by midpoints: above 1,
  // Ferry is estimated faster. 0 when Ferry or neither llama.cpp placement fits.
  double ferry_vs_llamacpp_tg() const;
  double ferry_vs_llamacpp_pp() const;
};

struct CardOptions {
  SimOptions sim;  // routing, prompt and decode lengths (budget set per card)
  bool ctx_set_by_user = false;
  // The card's free memory when the engines start (0: its VRAM): both llama.cpp's placements and
  // Ferry's budget (free - the fit margin) see it, as on a card partly taken (a ballast run).
  uint64_t free_bytes = 0;
};

// The memory a card offers when the engines start: free_bytes (--free), its VRAM when 0;
// ErrorKind::invalid_arg when free_bytes is more than the VRAM.
uint64_t card_memory(const HardwareProfile& gpu, uint64_t free_bytes);

CardRow card_row(const ModelSizes& m, const HardwareProfile& gpu,
                 const std::vector<HardwareProfile>& hosts, const HardwareProfile& params,
                 const CardOptions& o);

}  // namespace ferry::cli
