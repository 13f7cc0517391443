// The router skew model: routing the (RMS-normalized) embedding rows of every vocabulary token
// through layer 0's router, expert popularity must follow the planned ranks with a Zipf exponent
// near --router-skew, and be near uniform without skew.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

struct Routing {
  double exponent = 0;        // -slope of log(frequency) vs log(rank), ranks by observed frequency
  double rank_agreement = 0;  // Spearman correlation of observed and planned popularity
};

std::vector<float> values(const ModelPlan& p, const std::string& name) {
  const TensorPlan* t = p.find(name);
  std::vector<float> v(t->n_elements());
  generate_rows(p, *t, 0, t->n_rows(), v.data());
  return v;
}

Routing route_vocabulary(float skew) {
  Options o;
  o.arch = Arch::qwen3moe;
  o.preset = Preset::tiny;
  o.n_layer = 1;
  o.n_expert = 64;
  o.n_expert_used = 8;
  o.seed = 21;
  o.router_skew = skew;
  const ModelPlan p = make_plan(o);
  const uint32_t n = p.hp.n_embd, E = p.hp.n_expert, k = p.hp.n_expert_used, V = p.hp.n_vocab;
  const auto emb = values(p, "token_embd.weight");
  const auto norm = values(p, "blk.0.ffn_norm.weight");
  const auto router = values(p, "blk.0.ffn_gate_inp.weight");

  std::vector<double> count(E, 0.0), planned(E);
  for (uint32_t e = 0; e < E; ++e) planned[e] = router[uint64_t{e} * n + p.skew_channel];  // higher = hotter
  std::vector<double> x(n), logit(E);
  std::vector<uint32_t> order(E);
  for (uint32_t t = 0; t < V; ++t) {
    const float* h = emb.data() + uint64_t{t} * n;
    double ss = 0;
    for (uint32_t i = 0; i < n; ++i) ss += double{h[i]} * h[i];
    const double inv_rms = 1.0 / std::sqrt(ss / n + 1e-6);
    for (uint32_t i = 0; i < n; ++i) x[i] = h[i] * inv_rms * norm[i];
    for (uint32_t e = 0; e < E; ++e) {
      double s = 0;
      for (uint32_t i = 0; i < n; ++i) s += router[uint64_t{e} * n + i] * x[i];
      logit[e] = s;
    }
    std::iota(order.begin(), order.end(), 0u);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](uint32_t a, uint32_t b) { return logit[a] > logit[b]; });
    for (uint32_t j = 0; j < k; ++j) count[order[j]] += 1;
  }

  Routing r;
  std::vector<double> freq = count;
  std::sort(freq.rbegin(), freq.rend());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int m = 0;
  for (uint32_t i = 0; i < E; ++i) {
    if (freq[i] <= 0) continue;
    const double lx = std::log(i + 1.0), ly = std::log(freq[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly, ++m;
  }
  r.exponent = -(m * sxy - sx * sy) / (m * sxx - sx * sx);
  auto ranks = [&](const std::vector<double>& v) {
    std::vector<uint32_t> idx(E);
    std::iota(idx.begin(), idx.end(), 0u);
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return v[a] > v[b]; });
    std::vector<double> rk(E);
    for (uint32_t i = 0; i < E; ++i) rk[idx[i]] = i;
    return rk;
  };
  const auto ro = ranks(count), rp = ranks(planned);
  double d2 = 0;
  for (uint32_t e = 0; e < E; ++e) d2 += (ro[e] - rp[e]) * (ro[e] - rp[e]);
  const double ne = E;
  r.rank_agreement = 1.0 - 6.0 * d2 / (ne * (ne * ne - 1.0));
  return r;
}

TEST(SynthRouting, SkewFollowsZipfExponent) {
  const Routing flat = route_vocabulary(0.0f);
  const Routing mild = route_vocabulary(0.5f);
  const Routing steep = route_vocabulary(1.0f);
  std::printf("exponents: S=0 %.3f, S=0.5 %.3f (rank agreement %.2f), S=1 %.3f (rank agreement %.2f)\n", flat.exponent,
              mild.exponent, mild.rank_agreement, steep.exponent, steep.rank_agreement);
  EXPECT_LT(flat.exponent, 0.35) << "no skew should route near uniformly";
  EXPECT_GT(mild.exponent, 0.25);
  EXPECT_LT(mild.exponent, 0.75);
  EXPECT_GT(steep.exponent, 0.55);
  EXPECT_LT(steep.exponent, 1.35);
  EXPECT_GT(steep.rank_agreement, 0.9) << "hot experts must be the planned ones";
  EXPECT_GT(mild.rank_agreement, 0.7);
}

}  // namespace
}  // namespace ferry::synth
