#include "runtime/tokenizer/unicode.hpp"

namespace ferry::tok {

std::vector<uint32_t> decode_utf8_lossy(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back((uint32_t(b & 0x1F) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back((uint32_t(b & 0x0F) << 12) |
                    (uint32_t(static_cast<uint8_t>(s[i + 1]) & 0x3F) << 6) |
                    (static_cast<uint8_t>(s[i + 2]) & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      const uint32_t cp = (uint32_t(b & 0x07) << 18) |
                          (uint32_t(static_cast<uint8_t>(s[i + 1]) & 0x3F) << 12) |
                          (uint32_t(static_cast<uint8_t>(s[i + 2]) & 0x3F) << 6) |
                          (static_cast<uint8_t>(s[i + 3]) & 0x3F);
      if (cp <= 0x10FFFF) {
        out.push_back(cp);
        i += 4;
      } else {
        out.push_back(0xFFFD);
        i += 1;
      }
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const ByteLevel& ByteLevel::get() {
  static const ByteLevel instance;
  return instance;
}

ByteLevel::ByteLevel() {
  cp_to_byte_.fill(-1);
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
    append_utf8(byte_to_utf8_[b], cp);
    cp_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

}  // namespace ferry::tok
