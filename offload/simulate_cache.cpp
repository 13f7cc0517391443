#include "offload/simulate_cache.hpp"

#include <algorithm>
#include <numeric>

#include "offload/expert_cache.hpp"
#include "offload/simulate_routing.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

std::vector<std::vector<uint8_t>> static_cache_sets(SimRouter& router, int32_t n_layer,
                                                    int32_t n_expert, int32_t top_k,
                                                    int32_t slots_per_layer, int64_t profile_tokens) {
  const auto E = static_cast<size_t>(n_expert);
  std::vector<std::vector<uint64_t>> count(static_cast<size_t>(n_layer), std::vector<uint64_t>(E, 0));
  std::vector<int32_t> ids(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < profile_tokens; ++t)
    for (int32_t l = 0; l < n_layer; ++l) {
      router.next(l, ids.data());
      for (int32_t e : ids) ++count[static_cast<size_t>(l)][static_cast<size_t>(e)];
    }
  const auto n = static_cast<size_t>(std::clamp(slots_per_layer, 0, n_expert));
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(n_layer), std::vector<uint8_t>(E, 0));
  std::vector<int32_t> order(E);
  for (size_t l = 0; l < in.size(); ++l) {
    std::iota(order.begin(), order.end(), 0);
    // Most routed first; stable, so a tie goes to the lower id.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return count[l][static_cast<size_t>(a)] > count[l][static_cast<size_t>(b)];
    });
    for (size_t i = 0; i < n; ++i) in[l][static_cast<size_t>(order[i])] = 1;
  }
  return in;
}

ProjectionLruResult projection_lru_hit_rate(const SimModel& m, const SimRouting& routing,
                                            int32_t slots_per_layer, int64_t n_prompt,
                                            int64_t n_decode) {
  if (slots_per_layer < 1)
    fail(ErrorKind::invalid_arg, "projection LRU: {} slots per layer (at least 1)", slots_per_layer);
  constexpr int32_t kProjections = 3;  // gate, up, down: one slot each
  SimRouter router(routing, m.n_layer, m.n_expert, m.top_k);
  // One group of slots per layer: the LRU is per layer, as the compared cache's.
  SlotPartition part;
  part.layer_group.resize(static_cast<size_t>(m.n_layer));
  std::iota(part.layer_group.begin(), part.layer_group.end(), 0);
  part.group_slots.assign(static_cast<size_t>(m.n_layer), slots_per_layer);
  ExpertCache cache(slots_per_layer * m.n_layer, m.n_layer, m.n_expert * kProjections,
                    EvictionPolicy::lru, part);
  // Each access its own tick: the LRU orders every use, within a token too.
  uint64_t tick = 0, uses = 0, hits = 0, prompt_uses = 0, decode_uses = 0, decode_hits = 0;
  const auto use = [&](int32_t layer, int32_t expert, int32_t projection, bool decoding) {
    const int32_t key = expert * kProjections + projection;
    const bool hit = cache.access(layer, key, ++tick) >= 0;
    if (!hit) cache.mark_ready(cache.insert(layer, key, tick));
    ++uses;
    hits += hit ? 1 : 0;
    prompt_uses += decoding ? 0 : 1;
    decode_uses += decoding ? 1 : 0;
    decode_hits += decoding && hit ? 1 : 0;
  };
  constexpr int32_t kGate = 0, kUp = 1, kDown = 2;
  std::vector<int32_t> ids(static_cast<size_t>(m.top_k));
  std::vector<int32_t> batch;
  for (int32_t l = 0; l < m.n_layer; ++l) {
    // The prompt is one batch: the experts it routes to, by id (imp's legacy prefill path walks
    // its expert offsets in id order), through the cache only if all their projections fit.
    batch.clear();
    for (int64_t t = 0; t < n_prompt; ++t) {
      router.next(l, ids.data());
      for (int32_t e : ids)
        if (std::find(batch.begin(), batch.end(), e) == batch.end()) batch.push_back(e);
    }
    if (static_cast<int64_t>(batch.size()) * kProjections > slots_per_layer) continue;
    std::sort(batch.begin(), batch.end());
    for (int32_t e : batch) {
      use(l, e, kGate, false);
      use(l, e, kUp, false);
    }
    for (int32_t e : batch) use(l, e, kDown, false);
  }
  for (int64_t t = 0; t < n_decode; ++t)
    for (int32_t l = 0; l < m.n_layer; ++l) {
      router.next(l, ids.data());
      for (int32_t p : {kGate, kUp, kDown})
        for (int32_t e : ids) use(l, e, p, true);
    }
  ProjectionLruResult r;
  r.decode_uses = decode_uses;
  r.prompt_uses = prompt_uses;
  r.decode_hit_rate = decode_uses ? double(decode_hits) / double(decode_uses) : 0.0;
  r.all_hit_rate = uses ? double(hits) / double(uses) : 0.0;
  return r;
}

}  // namespace ferry
