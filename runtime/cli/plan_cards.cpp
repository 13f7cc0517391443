#include "runtime/cli/plan_cards.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace ferry::cli {
namespace {

void band(Estimate& e, const std::vector<double>& tg, const std::vector<double>& pp) {
  if (tg.empty()) return;
  e.tg_low = *std::min_element(tg.begin(), tg.end());
  e.tg_high = *std::max_element(tg.begin(), tg.end());
  e.pp_low = *std::min_element(pp.begin(), pp.end());
  e.pp_high = *std::max_element(pp.begin(), pp.end());
  e.tg = (e.tg_low + e.tg_high) / 2;
  e.pp = (e.pp_low + e.pp_high) / 2;
}

// The largest context whose plan still holds top_k slots: the KV cache grows by a fixed number of
// bytes per position (the state and workspace do not depend on it).
int64_t max_context(const ModelSizes& m, uint64_t budget) {
  PlacementInput in = m.sim.placement;
  in.budget_bytes = budget;
  in.kv_bytes = 0;
  uint64_t largest = 0;
  for (uint64_t b : in.layer_expert_bytes) largest = std::max(largest, b);
  Plan probe;
  try {
    probe = make_plan(in);
  } catch (const Error&) {
    return 0;
  }
  const uint64_t minimum = probe.fixed_bytes() + uint64_t(m.sim.top_k) * largest;
  if (budget <= minimum || m.sim.kv_bytes_per_position == 0) return 0;
  const int64_t n = int64_t((budget - minimum) / m.sim.kv_bytes_per_position);
  return std::min<int64_t>(n, m.n_ctx_train);
}

double ratio(const Estimate& ferry, const Estimate& fit, const Estimate& ncmoe, double Estimate::*v) {
  const double llama = std::max(fit.fits ? fit.*v : 0.0, ncmoe.fits ? ncmoe.*v : 0.0);
  return ferry.fits && llama > 0 ? ferry.*v / llama : 0.0;
}

}  // namespace

double CardRow::ferry_vs_llamacpp_tg() const { return ratio(ferry, llamacpp_fit, llamacpp_ncmoe, &Estimate::tg); }
double CardRow::ferry_vs_llamacpp_pp() const { return ratio(ferry, llamacpp_fit, llamacpp_ncmoe, &Estimate::pp); }

uint64_t card_memory(const HardwareProfile& gpu, uint64_t free_bytes) {
  const auto vram = static_cast<uint64_t>(gpu.number("vram_bytes"));
  if (free_bytes > vram)
    fail(ErrorKind::invalid_arg, "--free: {:.2f} GiB is more than {}'s {:.2f} GiB of VRAM",
         double(free_bytes) / double(1ull << 30), gpu.id, double(vram) / double(1ull << 30));
  return free_bytes > 0 ? free_bytes : vram;
}

CardRow card_row(const ModelSizes& m, const HardwareProfile& gpu,
                 const std::vector<HardwareProfile>& hosts, const HardwareProfile& params,
                 const CardOptions& o) {
  CardRow row;
  row.gpu = gpu.id;
  row.gpu_name = gpu.name;
  row.vram_bytes = static_cast<uint64_t>(gpu.number("vram_bytes"));
  const uint64_t card = card_memory(gpu, o.free_bytes);
  std::vector<double> f_tg, f_pp, l_tg, l_pp, n_tg, n_pp;
  for (const HardwareProfile& h : hosts) {
    row.hosts.push_back(h.id);
    const SimRates r = sim_rates(gpu, h, params);
    row.budget_bytes = card > r.fit_margin_bytes ? card - r.fit_margin_bytes : 0;
    SimOptions so = o.sim;
    so.budget_bytes = row.budget_bytes;
    so.trace_path.clear();
    SimResult ferry;
    try {
      row.plan = sim_plan(m.sim, so.budget_bytes);
      row.fits = true;
      ferry = simulate_ferry(m.sim, r, so);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::budget) throw;
      ferry.strategy = SimStrategy::ferry;
      ferry.fits = false;
      ferry.note = e.what();
    }
    const LlamaPlacement fit = llamacpp_fit(m.sim, r, card, o.ctx_set_by_user);
    const LlamaPlacement nc = llamacpp_best_ncmoe(m.sim, r, card);
    const SimResult lf = simulate_llamacpp(m.sim, r, fit, o.sim, SimStrategy::llamacpp_fit);
    const SimResult ln = simulate_llamacpp(m.sim, r, nc, o.sim, SimStrategy::llamacpp_ncmoe);
    if (row.detail.empty()) row.detail = {ferry, lf, ln};
    if (ferry.fits) f_tg.push_back(ferry.tg_tps), f_pp.push_back(ferry.pp_tps);
    if (lf.fits) l_tg.push_back(lf.tg_tps), l_pp.push_back(lf.pp_tps);
    if (ln.fits) n_tg.push_back(ln.tg_tps), n_pp.push_back(ln.pp_tps);
    row.ferry.fits = ferry.fits;
    row.ferry.hit_rate = ferry.fits ? ferry.decode_hit_rate() : -1;
    row.ferry.note = ferry.note;
    row.llamacpp_fit.fits = lf.fits;
    row.llamacpp_fit.note = lf.note;
    row.llamacpp_ncmoe.fits = ln.fits;
    row.llamacpp_ncmoe.n_cpu_moe = ln.n_cpu_moe;
    row.llamacpp_ncmoe.note = ln.note;
  }
  band(row.ferry, f_tg, f_pp);
  band(row.llamacpp_fit, l_tg, l_pp);
  band(row.llamacpp_ncmoe, n_tg, n_pp);
  if (row.fits) {
    row.experts_on_gpu_fraction = row.plan.resident_fraction();
    row.max_context = max_context(m, row.budget_bytes);
  }
  return row;
}

}  // namespace ferry::cli
