#include "runtime/server/reply_text.hpp"

#include <algorithm>

namespace ferry::server {

ReplyText::ReplyText(const Tokenizer& tok, std::vector<std::string> stop)
    : stream_(tok), stop_(std::move(stop)) {}

std::string ReplyText::push(int32_t id) {
  if (stopped_) return {};
  held_ += stream_.push(id);
  return release();
}

std::string ReplyText::finish() {
  if (stopped_) return {};
  held_ += stream_.flush();
  std::string out = release();
  if (stopped_) return out;
  out += held_;
  held_.clear();
  return out;
}

std::string ReplyText::release() {
  // The earliest match wins; among matches at one position, the longest stop string.
  size_t best = std::string::npos, best_len = 0;
  for (const std::string& s : stop_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > best_len))) {
      best = at;
      best_len = s.size();
      stop_word_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Keep the longest suffix that is a proper prefix of a stop string: the next token may complete
  // it. Stop strings are valid UTF-8, so the cut falls on a character boundary.
  size_t keep = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace ferry::server
