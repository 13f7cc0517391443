#pragma once
// Token sampling with llama.cpp's defaults and order (common_params_sampling, llama-sampler.cpp):
// penalties (repetition, frequency, presence) → top-k → top-p → min-p → temperature → draw. temp <= 0 means greedy
// (argmax after the penalty; ties go to the lowest id).
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace ferry {

struct SamplingParams {
  float temp = 0.8f;
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  // OpenAI's penalties as llama.cpp applies them, over the same window: a token seen `count`
  // times loses count · frequency_penalty + presence_penalty from its logit. 0: off.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t repeat_last_n = 64;   // window of recent tokens the penalty looks at; 0: off,
                                // < 0: every token accepted since reset (llama.cpp: the context)
  uint64_t seed = 0xFFFFFFFF;   // llama.cpp's LLAMA_DEFAULT_SEED: pick a random seed
  // Test only (`ferry serve`/`ferry chat` with FERRY_TEST_FORCE_TOKENS, docs/server.md): when set,
  // sample() ignores the logits and returns these ids in order, one per call since reset(), then
  // the last one again. The caller ends the list with an end-of-generation token. Shared, not
  // copied: the list is a test's whole scripted reply.
  std::shared_ptr<const std::vector<int32_t>> forced_tokens;
};

// A candidate left after the filters, with its probability under the temperature.
struct TokenProb {
  int32_t id;
  float p;
};

class Sampler {
 public:
  // Throws ErrorKind::invalid_arg for NaN parameters or repeat_penalty <= 0.
  explicit Sampler(const SamplingParams& p);
  // Picks a token from logits (n_vocab); does not modify the caller's array. Draws from the RNG
  // exactly once per call unless greedy (as llama.cpp's dist sampler) or forced (forced_tokens).
  int32_t sample(std::span<const float> logits);
  // The candidates the draw chooses from, in the order it walks them (descending logit once a
  // filter sorted them, else id order), probabilities summing to 1. Greedy: the argmax alone.
  // Does not touch the RNG.
  std::vector<TokenProb> candidates(std::span<const float> logits);
  void accept(int32_t token);  // remember for the repetition penalty
  // Forgets accepted tokens and re-seeds (a fresh random seed when seed = 0xFFFFFFFF).
  void reset();
  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return p_; }

 private:
  // Runs penalty and filters on logits into cand_[0, n) with temperature applied; returns n.
  // sorted_ says whether cand_[0, n) is in descending logit order.
  size_t filter(std::span<const float> logits);

  SamplingParams p_;
  uint64_t seed_;
  std::mt19937 rng_;
  std::deque<int32_t> recent_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit, id)
  std::vector<float> logit_buf_;                 // scratch: (n_vocab) penalised logits
  std::vector<int32_t> penalized_;               // scratch: the window's ids, sorted
  bool sorted_ = false;
  size_t n_forced_ = 0;  // forced_tokens handed out since reset()
};

}  // namespace ferry
