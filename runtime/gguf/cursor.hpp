#pragma once
// Internal to runtime/gguf: a bounds-checked little-endian reader over the mapped file. Every read
// first checks that the bytes exist; a short file becomes ferry::Error naming the file, the item
// being read and the offset, never an out-of-bounds access.
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/core/error.hpp"

namespace ferry::gguf::detail {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read by memcpy of little-endian fields; big-endian hosts are not supported");

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& path)
      : base_(base), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }

  // Throws unless n more bytes exist; `what` names the item for the message.
  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(ErrorKind::format,
           "{}: truncated: {} at offset {} needs {} bytes, {} left (file size {})", path_, what,
           pos_, n, remaining(), size_);
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }

  // GGUF string: u64 length + bytes (no terminator). The length is checked against the bytes
  // left before anything is allocated.
  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail(ErrorKind::format, "{}: {} at offset {} claims a length of {} bytes, only {} left",
           path_, what, pos_ - 8, len, remaining());
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

}  // namespace ferry::gguf::detail
