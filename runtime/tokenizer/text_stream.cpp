// Streaming detokenization and the ChatML prompt format.
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry {
namespace {

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Bytes a UTF-8 sequence starting with c needs; 0 when c cannot start one.
size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC0 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF7) return 4;
  return 0;
}

}  // namespace

std::string TextStream::push(int32_t id) {
  pending_ += tok_.token_bytes(id, special_);
  // Hold back a trailing lead byte plus its continuation bytes when the sequence is not complete
  // yet. Anything malformed is passed through: holding it would never resolve.
  const size_t n = pending_.size();
  size_t lead = n;
  while (lead > 0 && n - lead < 4 &&
         is_continuation(static_cast<unsigned char>(pending_[lead - 1])))
    --lead;
  size_t cut = n;
  if (lead > 0) {
    const size_t need = sequence_length(static_cast<unsigned char>(pending_[lead - 1]));
    if (need > 1 && n - (lead - 1) < need) cut = lead - 1;
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string TextStream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

std::string format_chatml(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
  std::string s;
  for (const ChatMessage& m : msgs)
    s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) s += "<|im_start|>assistant\n";
  return s;
}

}  // namespace ferry
