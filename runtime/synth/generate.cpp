// Values of the synthetic tensors (the F32 weights before quantization). See docs/synth.md for the
// weight model; init.hpp for the random streams.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/core/error.hpp"
#include "runtime/synth/init.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

// Router offset per unit of skew: with unit-variance logit noise, an offset of -0.5·S·ln(rank)
// makes top-k routing frequencies fall off about as rank^-S for 128–512 experts (measured by
// simulation; with few experts top-k saturation flattens the curve).
constexpr double kSkewLogitPerUnit = 0.5;

// Scale of the output rows of unused ([PADn]) tokens: their logits stay near 0 while real tokens'
// have unit spread, so the argmax (and sampling) picks real tokens, as in a trained model.
constexpr float kUnusedTokenLogitScale = 0.1f;

// Popularity rank (0 = most routed) of every expert of a layer: a seeded permutation, so each layer
// has its own hot experts.
std::vector<uint32_t> expert_ranks(uint64_t seed, int layer, uint32_t n_expert) {
  std::vector<uint32_t> rank(n_expert);
  std::iota(rank.begin(), rank.end(), 0u);
  RowRng rng(hash_combine(seed, 0x0DE7A11Cull), static_cast<uint64_t>(layer));
  for (uint32_t i = n_expert; i > 1; --i) {  // Fisher–Yates
    const auto j = static_cast<uint32_t>(rng.bits() % i);
    std::swap(rank[i - 1], rank[j]);
  }
  return rank;
}

}  // namespace

void generate_rows(const ModelPlan& plan, const TensorPlan& t, uint64_t row_begin, uint64_t row_end,
                   float* out) {
  const uint64_t n = t.row_len();
  const uint64_t ts = tensor_seed(plan.options.seed, t.name);
  const uint32_t ch = plan.skew_channel;
  const uint64_t n_embd = plan.hp.n_embd;
  std::vector<uint32_t> ranks;
  if (t.init == Init::router && plan.options.router_skew > 0.0f)
    ranks = expert_ranks(plan.options.seed, t.layer, static_cast<uint32_t>(t.ne[1]));

  for (uint64_t r = row_begin; r < row_end; ++r) {
    float* y = out + (r - row_begin) * n;
    RowRng rng(ts, r);
    switch (t.init) {
      case Init::normal:
      case Init::writer:
      case Init::router:
      case Init::embedding:
        for (uint64_t i = 0; i < n; ++i) y[i] = t.scale * rng.normal();
        break;
      case Init::output: {
        const float s = r < plan.token_unused.size() && plan.token_unused[r] ? t.scale * kUnusedTokenLogitScale : t.scale;
        for (uint64_t i = 0; i < n; ++i) y[i] = s * rng.normal();
        break;
      }
      case Init::norm:
        for (uint64_t i = 0; i < n; ++i) y[i] = 1.0f + t.scale * rng.normal();
        break;
      case Init::ssm_a:
        for (uint64_t i = 0; i < n; ++i) y[i] = -(1.0f + 15.0f * rng.uniform());
        break;
      case Init::ssm_dt_bias:
        for (uint64_t i = 0; i < n; ++i) {
          const double dt = std::exp(std::log(1e-3) + rng.uniform() * (std::log(1e-1) - std::log(1e-3)));
          y[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus⁻¹(dt)
        }
        break;
    }
    switch (t.init) {
      case Init::writer:
        // Output projections never write the skew channel, so it keeps its embedding value.
        if (r % n_embd == ch) std::fill(y, y + n, 0.0f);
        break;
      case Init::embedding:
        y[ch] = plan.skew_channel_value;
        break;
      case Init::router:
        // Row r is expert r; its weight on the skew channel is the expert's logit offset divided
        // by the channel's (normalized) value.
        y[ch] = ranks.empty() ? 0.0f
                              : static_cast<float>(-kSkewLogitPerUnit * plan.options.router_skew *
                                                   std::log(1.0 + ranks[r]) / plan.skew_channel_value);
        break;
      default:
        break;
    }
  }
}

}  // namespace ferry::synth
