#pragma once
// UTF-8 and GPT-2 byte-level helpers with llama.cpp's exact semantics (its tokenizer is the
// reference Ferry must reproduce token for token).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tok {

struct CodepointRange {
  uint32_t first, last;  // inclusive
};

// Decodes UTF-8 as llama.cpp's unicode_cpts_from_utf8 does: each byte that does not start a
// well-formed sequence becomes U+FFFD and decoding resumes at the next byte. Like llama.cpp it
// does not reject overlong forms or surrogates (they decode to their numeric value); unlike it,
// a 4-byte form above U+10FFFF is treated as invalid (llama.cpp throws later on such input).
std::vector<uint32_t> decode_utf8_lossy(std::string_view s);

// Appends the UTF-8 form of cp (cp <= 0x10FFFF; surrogates are encoded like any other value).
void append_utf8(std::string& out, uint32_t cp);

// Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes), as
// llama.cpp's unicode_len_utf8.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// GPT-2 bytes_to_unicode: every byte maps to one printable code point (printable Latin-1 bytes
// to themselves, the rest to U+0100 + n in byte order). Byte-level BPE vocabularies store
// their token texts in this alphabet.
class ByteLevel {
 public:
  static const ByteLevel& get();
  // UTF-8 of the code point byte b maps to (1 or 2 bytes).
  const std::string& encode(uint8_t b) const { return byte_to_utf8_[b]; }
  // Byte a code point stands for, or -1 when it is not in the alphabet.
  int decode(uint32_t cp) const { return cp < cp_to_byte_.size() ? cp_to_byte_[cp] : -1; }

 private:
  ByteLevel();
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 0x144> cp_to_byte_;  // the alphabet lies below U+0144
};

}  // namespace ferry::tok
