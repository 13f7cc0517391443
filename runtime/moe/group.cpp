#include "runtime/moe/group.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace ferry {

ExpertGroups group_by_expert(const int32_t* ids, int64_t n_pairs, int32_t n_expert) {
  ExpertGroups g;
  g.start.assign(static_cast<size_t>(n_expert) + 1, 0);
  for (int64_t i = 0; i < n_pairs; ++i) ++g.start[static_cast<size_t>(ids[i]) + 1];
  for (int32_t e = 0; e < n_expert; ++e)
    g.start[static_cast<size_t>(e) + 1] += g.start[static_cast<size_t>(e)];
  g.pairs.resize(static_cast<size_t>(n_pairs));
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  for (int64_t i = 0; i < n_pairs; ++i)
    g.pairs[static_cast<size_t>(fill[static_cast<size_t>(ids[i])]++)] = i;
  return g;
}

void weighted_sum(int64_t n_tokens, int32_t top_k, int64_t n_embd, const float* y, const float* w,
                  float* out) {
  const auto token = [&](int64_t t) {
    float* o = out + t * n_embd;
    const float* wt = w + t * top_k;
    const float* yt = y + t * top_k * n_embd;
    for (int64_t j = 0; j < n_embd; ++j) o[j] = yt[j] * wt[0];
    for (int32_t s = 1; s < top_k; ++s)
      for (int64_t j = 0; j < n_embd; ++j) o[j] += yt[s * n_embd + j] * wt[s];
  };
  if (n_tokens == 1) return token(0);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tokens, 1), [&](auto r) {
    for (int64_t t = r.begin(); t < r.end(); ++t) token(t);
  });
}

}  // namespace ferry
