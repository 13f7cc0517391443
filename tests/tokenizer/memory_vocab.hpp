#pragma once
// A small in-memory byte-level vocabulary for unit tests: ids 0..255 are the 256 single bytes
// (in the GPT-2 alphabet), then the merged pieces the test asks for, then special tokens.
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/tokenizer/unicode.hpp"

namespace ferry::test {

// Text of raw bytes in the byte-level alphabet ("Ġ" for a space, ...).
inline std::string bl(std::string_view raw) {
  std::string out;
  for (char c : raw) out += tok::ByteLevel::get().encode(static_cast<uint8_t>(c));
  return out;
}

struct MemoryVocab {
  TokenizerVocab v;
  MemoryVocab() {
    v.pre = "qwen2";
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(tok::ByteLevel::get().encode(static_cast<uint8_t>(b)));
      v.token_types.push_back(1);
    }
  }
  // Adds merge "left right" (raw bytes) and the merged token; returns the token id.
  int32_t merge(std::string_view left, std::string_view right, bool add_token = true) {
    v.merges.push_back(bl(left) + " " + bl(right));
    if (!add_token) return -1;
    return add(bl(std::string(left) + std::string(right)), TokenType::normal);
  }
  int32_t add(std::string text, TokenType t) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(static_cast<int32_t>(t));
    return static_cast<int32_t>(v.tokens.size() - 1);
  }
  static int32_t byte(unsigned char b) { return b; }
};

}  // namespace ferry::test
