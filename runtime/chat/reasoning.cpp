// Reasoning split as llama-server's deepseek format: an output that starts (after whitespace) with
// <think> — or a prompt that already opened it — has its reasoning up to </think> in
// reasoning_content, trimmed; the content after </think> starts at its first non-space character.
#include "runtime/chat/output_split.hpp"

namespace ferry::chat {

namespace {
const std::string kOpen = "<think>";
const std::string kClose = "</think>";
const std::string kToolCall = "<tool_call>";
}  // namespace

bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t partial_tag_suffix(std::string_view buf, const std::vector<std::string>& tags) {
  size_t best = 0;
  for (const auto& tag : tags) {
    for (size_t n = std::min(buf.size(), tag.size() - 1); n > best; --n) {
      if (buf.substr(buf.size() - n) == std::string_view(tag).substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

void HeldSpace::emit(std::string_view s, std::string& out) {
  size_t last = s.size();
  while (last > 0 && is_json_space(s[last - 1])) --last;
  if (last == 0) {
    held.append(s);
    return;
  }
  out += held;
  out.append(s.substr(0, last));
  held.assign(s.substr(last));
}

ReasoningSplitter::ReasoningSplitter(ReasoningFormat fmt, bool starts_in_reasoning,
                                     bool tool_call_ends_reasoning)
    : fmt_(fmt),
      state_(starts_in_reasoning ? State::reasoning : State::start),
      skip_space_(starts_in_reasoning) {
  end_tags_.push_back(kClose);
  if (tool_call_ends_reasoning) end_tags_.push_back(kToolCall);
}

void ReasoningSplitter::feed(std::string_view piece, std::string& reasoning, std::string& content) {
  if (fmt_ == ReasoningFormat::none) {
    content.append(piece);
    return;
  }
  buf_.append(piece);
  step(reasoning, content);
}

void ReasoningSplitter::step(std::string& reasoning, std::string& content) {
  while (!buf_.empty()) {
    if (skip_space_) {
      size_t k = 0;
      while (k < buf_.size() && is_json_space(buf_[k])) ++k;
      buf_.erase(0, k);
      if (buf_.empty()) return;
      skip_space_ = false;
    }
    if (state_ == State::start) {
      size_t k = 0;
      while (k < buf_.size() && is_json_space(buf_[k])) ++k;
      std::string_view rest = std::string_view(buf_).substr(k);
      if (rest.size() < kOpen.size() && kOpen.compare(0, rest.size(), rest) == 0)
        return;  // undecided
      if (rest.substr(0, kOpen.size()) == kOpen) {
        buf_.erase(0, k + kOpen.size());
        state_ = State::reasoning;
        skip_space_ = true;
      } else {
        state_ = State::content;
      }
      continue;
    }
    if (state_ == State::content) {
      content += buf_;
      buf_.clear();
      return;
    }
    size_t at = std::string::npos;
    const std::string* tag = nullptr;
    for (const auto& t : end_tags_) {
      size_t p = buf_.find(t);
      if (p < at) at = p, tag = &t;
    }
    if (tag) {
      reasoning_space_.emit(std::string_view(buf_).substr(0, at), reasoning);
      reasoning_space_.drop();
      buf_.erase(
          0, at + (*tag == kClose ? kClose.size() : 0));  // a <tool_call> stays for the tool parser
      state_ = State::content;
      skip_space_ = true;
      continue;
    }
    size_t keep = partial_tag_suffix(buf_, end_tags_);
    reasoning_space_.emit(std::string_view(buf_).substr(0, buf_.size() - keep), reasoning);
    buf_.erase(0, buf_.size() - keep);
    return;
  }
}

void ReasoningSplitter::finish(std::string& reasoning, std::string& content) {
  if (fmt_ == ReasoningFormat::none) return;
  if (state_ == State::reasoning) {
    if (!skip_space_) reasoning_space_.emit(buf_, reasoning);  // an unclosed block stays reasoning
  } else if (state_ == State::start || !skip_space_) {
    content += buf_;
  }
  buf_.clear();
}

}  // namespace ferry::chat
