#pragma once
// Helpers for the GGUF tests: a scratch directory per test, file I/O, and RawGguf, a byte-level
// builder that can write anything — including files the Writer would refuse to produce.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::gguf::testing {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& ch : name)
      if (ch == '/') ch = '_';
    dir_ = fs::temp_directory_path() / ("ferry_gguf_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Byte-level GGUF builder: every field is written exactly as given.
class RawGguf {
 public:
  template <typename T>
  RawGguf& put(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    bytes_.append(b, sizeof(T));
    return *this;
  }
  RawGguf& u8(uint8_t x) { return put(x); }
  RawGguf& u32(uint32_t x) { return put(x); }
  RawGguf& u64(uint64_t x) { return put(x); }
  RawGguf& str(const std::string& s) {
    u64(s.size());
    bytes_ += s;
    return *this;
  }
  RawGguf& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  RawGguf& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  RawGguf& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                  uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  RawGguf& pad(uint32_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back('\0');
    return *this;
  }
  RawGguf& fill(size_t n, uint8_t seed = 1) {
    for (size_t i = 0; i < n; ++i) bytes_.push_back(static_cast<char>((seed + i * 131) & 0xff));
    return *this;
  }
  const std::string& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

// Opens `path` expecting a ferry::Error whose message contains `needle` and the file path.
// Returns the message.
inline std::string expect_open_error(const std::string& path, const std::string& needle) {
  try {
    (void)File::open(path);
  } catch (const ferry::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos)
        << "message: " << msg << "\nexpected: " << needle;
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    return msg;
  }
  ADD_FAILURE() << "File::open(" << path << ") did not throw (expected: " << needle << ")";
  return {};
}

}  // namespace ferry::gguf::testing
