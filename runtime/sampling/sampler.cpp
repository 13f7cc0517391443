#include "runtime/sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

constexpr uint64_t kRandomSeed = 0xFFFFFFFF;
// top-p on unsorted candidates first sorts only this many (llama.cpp's adaptive heuristic): the
// nucleus of a peaked distribution is small; a flat one falls back to a full sort.
constexpr size_t kTopPFirstSort = 256;

// Descending logit, ties to the lower id (llama.cpp leaves ties unordered; Ferry is
// deterministic).
bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

uint64_t pick_seed(uint64_t seed) {
  if (seed != kRandomSeed) return seed;
  std::random_device rd;
  return rd();
}

}  // namespace

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  if (std::isnan(p_.temp) || std::isnan(p_.top_p) || std::isnan(p_.min_p) ||
      std::isnan(p_.repeat_penalty) || std::isnan(p_.frequency_penalty) || std::isnan(p_.presence_penalty))
    fail(ErrorKind::invalid_arg, "sampling parameters must not be NaN");
  if (!(p_.repeat_penalty > 0.0f))
    fail(ErrorKind::invalid_arg, "repeat penalty must be > 0 (1 = off), got {}", p_.repeat_penalty);
  reset();
}

void Sampler::reset() {
  seed_ = pick_seed(p_.seed);
  // mt19937 takes 32 bits, like llama.cpp's uint32_t seeds.
  rng_.seed(static_cast<std::mt19937::result_type>(seed_ & 0xFFFFFFFFu));
  recent_.clear();
  n_forced_ = 0;
}

void Sampler::accept(int32_t token) {
  if (p_.repeat_last_n == 0) return;
  recent_.push_back(token);
  if (p_.repeat_last_n > 0)
    while (recent_.size() > static_cast<size_t>(p_.repeat_last_n)) recent_.pop_front();
}

size_t Sampler::filter(std::span<const float> logits) {
  if (logits.empty()) fail(ErrorKind::invalid_arg, "sampler: empty logits");
  const size_t n_vocab = logits.size();
  logit_buf_.assign(logits.begin(), logits.end());  // (n_vocab) logits after the penalty
  sorted_ = false;

  // llama.cpp's penalties sampler, once per distinct token in the window: the repetition penalty
  // divides a positive logit and multiplies a negative one (so it always lowers it), then the
  // frequency and presence penalties subtract count · frequency + presence.
  const bool penalties = p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f;
  if (penalties && !recent_.empty()) {
    penalized_.assign(recent_.begin(), recent_.end());
    std::sort(penalized_.begin(), penalized_.end());
    for (size_t i = 0; i < penalized_.size();) {
      size_t j = i;
      while (j < penalized_.size() && penalized_[j] == penalized_[i]) ++j;
      const int32_t id = penalized_[i];
      const float count = static_cast<float>(j - i);
      i = j;
      if (id < 0 || static_cast<size_t>(id) >= n_vocab) continue;
      float& l = logit_buf_[id];
      l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
      l -= count * p_.frequency_penalty + p_.presence_penalty;
    }
  }

  cand_.clear();
  if (p_.temp <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < n_vocab; ++i)
      if (logit_buf_[i] > logit_buf_[best]) best = i;  // strict: the first (lowest id) max wins
    cand_.push_back({logit_buf_[best], static_cast<int32_t>(best)});
    sorted_ = true;
    return 1;
  }

  size_t n = n_vocab;
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    // Heap of the k best seen so far, worst on top: one compare rejects almost every logit of
    // a 150k-250k vocabulary, where copying and selecting over all of it costs ~10x more.
    const size_t k = static_cast<size_t>(p_.top_k);
    for (size_t i = 0; i < k; ++i) cand_.push_back({logit_buf_[i], static_cast<int32_t>(i)});
    std::make_heap(cand_.begin(), cand_.end(), before);
    for (size_t i = k; i < n_vocab; ++i) {
      // Ids only grow, so an equal logit never displaces a kept token (ties keep lower ids).
      if (!(logit_buf_[i] > cand_.front().first)) continue;
      std::pop_heap(cand_.begin(), cand_.end(), before);
      cand_.back() = {logit_buf_[i], static_cast<int32_t>(i)};
      std::push_heap(cand_.begin(), cand_.end(), before);
    }
    std::sort_heap(cand_.begin(), cand_.end(), before);
    n = k;
    sorted_ = true;
  } else {
    cand_.resize(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) cand_[i] = {logit_buf_[i], static_cast<int32_t>(i)};
    if (p_.top_k > 0) {
      std::sort(cand_.begin(), cand_.end(), before);
      sorted_ = true;
    }
  }

  if (p_.top_p < 1.0f && n > 1) {
    // Smallest prefix (descending) whose probability reaches top_p; at least one token.
    float max_l = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) max_l = std::max(max_l, cand_[i].first);
    float sum = 0.0f;
    for (size_t i = 0; i < n; ++i) sum += std::exp(cand_[i].first - max_l);
    size_t sorted_upto = sorted_ ? n : 0;
    auto sort_prefix = [&](size_t m) {
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(m),
                        cand_.begin() + static_cast<std::ptrdiff_t>(n), before);
      sorted_upto = m;
    };
    if (!sorted_) sort_prefix(std::min(kTopPFirstSort, n));
    float cum = 0.0f;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      if (i == sorted_upto) sort_prefix(n);
      cum += std::exp(cand_[i].first - max_l) / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    if (keep == n && sorted_upto < n) sort_prefix(n);
    n = keep;
    sorted_ = true;
  }

  if (p_.min_p > 0.0f && n > 1) {
    // p_i >= min_p · p_max  ⇔  logit_i >= logit_max + log(min_p) (before temperature).
    float max_l = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) max_l = std::max(max_l, cand_[i].first);
    const float min_l = max_l + std::log(p_.min_p);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
      if (cand_[i].first >= min_l) cand_[kept++] = cand_[i];  // stable: keeps the order
    n = std::max<size_t>(kept, 1);
  }

  for (size_t i = 0; i < n; ++i) cand_[i].first /= p_.temp;
  return n;
}

std::vector<TokenProb> Sampler::candidates(std::span<const float> logits) {
  const size_t n = filter(logits);
  float max_l = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) max_l = std::max(max_l, cand_[i].first);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(cand_[i].first - max_l);
  std::vector<TokenProb> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = {cand_[i].second, static_cast<float>(std::exp(cand_[i].first - max_l) / sum)};
  return out;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.forced_tokens && !p_.forced_tokens->empty()) {
    const std::vector<int32_t>& f = *p_.forced_tokens;
    return f[std::min(n_forced_++, f.size() - 1)];
  }
  const size_t n = filter(logits);
  if (p_.temp <= 0.0f) return cand_[0].second;
  // llama.cpp's dist sampler: one uniform draw in [0, 1), walk the softmax accumulating in
  // double until the running sum reaches draw · total.
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double r = uniform(rng_);
  if (n == 1) return cand_[0].second;
  float max_l = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) max_l = std::max(max_l, cand_[i].first);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += std::exp(cand_[i].first - max_l);
  if (!(total > 0.0) || !std::isfinite(total)) return cand_[0].second;  // all -inf or NaN logits
  const double target = total * r;
  double run = 0.0;
  for (size_t i = 0; i < n; ++i) {
    run += std::exp(cand_[i].first - max_l);
    if (run >= target) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace ferry
