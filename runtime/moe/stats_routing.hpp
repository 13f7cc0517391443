#pragma once
// Statistics of the routing a run actually used, per layer — the three figures the locality
// generator targets (docs/routing.md):
//   repeat-next    share of a token's experts that the previous token also used
//   recur-in-W     share used by at least one of the previous W tokens (counted from token W on)
//   top-half       share of all selections that fall on the more-used half of the experts
// and a reuse-distance histogram: for each use at token t >= 1, t minus the last token that used
// the same expert (1 = the previous token: bin 1 is repeat-next), in bins 1, 2, 3-4, 5-8, ...,
// 33-64, > 64, and "first" for an expert not used before. Token distance, not LRU stack distance.
// Fed token by token (prefill batches row by row); not thread-safe (one model, one step at a time).
#include <array>
#include <cstdint>
#include <string>
#include <vector>


namespace ferry {

class RoutingLocalityStats {
 public:
  RoutingLocalityStats(int32_t n_layer, int32_t n_expert, int32_t window = 8);
  // ids: (n_tokens, top_k) of one MoE step of `layer`. Out-of-range ids/layers are ignored.
  void observe(int32_t layer, const int32_t* ids, int32_t n_tokens, int32_t top_k);

  // Reuse-distance bins: kReuseBins − 2 power-of-two ranges (upper bounds kReuseUpper), then
  // "> 64" and "first".
  static constexpr int kReuseBins = 9;
  static constexpr std::array<int64_t, 7> kReuseUpper = {1, 2, 4, 8, 16, 32, 64};
  static int reuse_bin(int64_t distance);  // distance < 1: the "first" bin
  static std::string reuse_bin_name(int bin);
  using ReuseHistogram = std::array<int64_t, kReuseBins>;  // uses per bin

  struct Layer {
    ReuseHistogram reuse{};  // counts; shares are reuse[b] / sum
    int64_t tokens = 0;
    double repeat_next = 0, recur_window = 0, top_half_share = 0;
    int32_t distinct = 0;  // experts used at least once
  };
  Layer layer(int32_t l) const;
  Layer all() const;  // pooled over layers
  std::string table() const;  // the locality table, then the reuse-distance histogram (% of uses)
  int32_t window() const { return window_; }

 private:
  struct Acc {
    int64_t tokens = 0, rep = 0, rep_n = 0, win = 0, win_n = 0;
    ReuseHistogram reuse{};
    std::vector<int64_t> last_use, count;  // (n_expert)
  };
  Layer summarize(const Acc& a) const;
  int32_t n_expert_, window_;
  std::vector<Acc> acc_;  // (n_layer)
};

}  // namespace ferry
