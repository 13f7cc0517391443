#pragma once
// Token sampling with llama.cpp's defaults and order: repetition penalty → top-k → top-p → min-p
// → temperature → draw. temp <= 0 means greedy (argmax).
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace ferry {

struct SamplingParams {
  float temp = 0.8f;
  int32_t top_k = 40;         // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;   // window of recent tokens the penalty looks at
  uint64_t seed = 0xFFFFFFFF;   // llama.cpp's LLAMA_DEFAULT_SEED: pick a random seed
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token from logits (n_vocab); does not modify the caller's array.
  int32_t sample(std::span<const float> logits);
  void accept(int32_t token);  // remember for the repetition penalty
  void reset();
  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  uint64_t seed_;
  std::mt19937 rng_;
  std::deque<int32_t> recent_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit, id)
};

}  // namespace ferry
