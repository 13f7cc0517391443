#pragma once
// Activation profiles: how often each layer's router picked each expert in a run. Recorded with
// `--record-profile FILE`, read with `--profile FILE` to choose the initial hot set of the VRAM
// expert cache. File format (JSON, one object):
//
//   {"format": "ferry-expert-profile", "version": 1,
//    "n_layer": L, "n_expert": E, "tokens": T,          // T: tokens routed (per layer)
//    "counts": [[c_0_0, ..., c_0_{E-1}], ..., [c_{L-1}_0, ...]]}   // (L, E) selections
//
// Counts are selections (a token picking k experts adds k per layer), so rows sum to T·k.
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

class ExpertProfile {
 public:
  ExpertProfile() = default;
  ExpertProfile(int32_t n_layer, int32_t n_expert);

  int32_t n_layer() const { return n_layer_; }
  int32_t n_expert() const { return n_expert_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t count(int32_t layer, int32_t expert) const {
    return counts_[static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) +
                   static_cast<size_t>(expert)];
  }
  // One MoE step: ids (n_tokens, top_k). Tokens are counted on layer 0's steps.
  void add(int32_t layer, const int32_t* ids, int64_t n_tokens, int32_t top_k);

  // ErrorKind::io / format naming the file (and the field) on failure.
  static ExpertProfile read(const std::string& path);
  void write(const std::string& path) const;
  std::string to_json() const;

 private:
  int32_t n_layer_ = 0, n_expert_ = 0;
  uint64_t tokens_ = 0;
  std::vector<uint64_t> counts_;  // (n_layer, n_expert)
};

}  // namespace ferry
