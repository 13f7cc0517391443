// Malformed and hostile files, generated here: each must fail with a ferry::Error whose message
// names the file and the problem — never a crash, hang or huge allocation.
#include <cstdint>

#include "tests/gguf/gguf_test_util.hpp"

using namespace ferry;
using namespace ferry::gguf;
using namespace ferry::gguf::testing;

namespace {

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12;
constexpr uint64_t kHuge = uint64_t{1} << 62;

// A small valid file built from raw bytes (two KVs, two tensors), used as the base to corrupt.
RawGguf valid_raw() {
  RawGguf g;
  g.header(3, 2, 2).kv_str("general.architecture", "tiny").kv_u32("tiny.block_count", 2);
  g.tensor("a", {8, 2}, kF32, 0).tensor("b", {32}, kQ8_0, 64);
  g.pad(32).fill(64, 3).fill(34, 9);
  return g;
}

class Malformed : public ::testing::Test {
 protected:
  // Writes `bytes` and expects File::open to fail mentioning `needle`.
  std::string expect_error(const std::string& bytes, const std::string& needle) {
    const std::string path = dir_.path("bad_" + std::to_string(n_++) + ".gguf");
    write_bytes(path, bytes);
    return expect_open_error(path, needle);
  }
  ScratchDir dir_;
  int n_ = 0;
};

TEST_F(Malformed, BaseFileIsValid) {
  const std::string path = dir_.path("base.gguf");
  write_bytes(path, valid_raw().bytes());
  const File f = File::open(path);
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.get_u32("tiny.block_count"), 2u);
  EXPECT_EQ(f.tensor("b").file_offset + 34, f.file_size());
}

// Every proper prefix of the file must fail: the last tensor's data ends at the last byte.
TEST_F(Malformed, TruncatedAtEveryByte) {
  const std::string full = valid_raw().bytes();
  const std::string path = dir_.path("prefix.gguf");
  for (size_t len = 0; len < full.size(); ++len) {
    write_bytes(path, full.substr(0, len));
    try {
      (void)File::open(path);
      ADD_FAILURE() << "prefix of " << len << " bytes opened";
    } catch (const Error& e) {
      const std::string msg = e.what();
      const bool sensible = msg.find("truncated") != std::string::npos ||
                            msg.find("past end of file") != std::string::npos ||
                            msg.find("impossible in the") != std::string::npos ||
                            msg.find("claims a length") != std::string::npos;
      EXPECT_TRUE(sensible) << "prefix " << len << ": " << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_EQ(e.kind(), ErrorKind::format) << msg;
    }
  }
}

// Random byte corruption: whatever happens must be a clean open or a ferry::Error.
TEST_F(Malformed, RandomCorruptionNeverCrashes) {
  const std::string base = valid_raw().bytes();
  const std::string path = dir_.path("fuzz.gguf");
  std::mt19937 rng(2024);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = base;
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_flips; ++k) {
      const size_t at = rng() % b.size();
      // Mostly small changes; sometimes an all-ones byte to produce huge counts.
      b[at] = static_cast<char>(rng() % 3 == 0 ? 0xff : rng());
    }
    write_bytes(path, b);
    try {
      const File f = File::open(path);
      for (const auto& t : f.tensors()) ASSERT_LE(t.file_offset + t.n_bytes, f.file_size());
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 1000);  // most corruptions of the header area are detected
}

TEST_F(Malformed, MissingEmptyAndNotRegular) {
  try {
    (void)File::open(dir_.path("does_not_exist.gguf"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  expect_open_error(dir_.dir().string(), "not a regular file");
  expect_error("", "too small for a GGUF header");
}

TEST_F(Malformed, MagicAndVersion) {
  std::string b = valid_raw().bytes();
  b[0] = 'G', b[1] = 'G', b[2] = 'M', b[3] = 'L';
  expect_error(b, "not a GGUF file (magic 'GGML'");
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    RawGguf g;
    g.header(v, 0, 0);
    const std::string needle = v == 1             ? "GGUF version 1 is not supported"
                               : v == 0x03000000u ? "byte-swapped"
                                                  : "unsupported GGUF version " + std::to_string(v);
    const std::string msg = expect_error(g.bytes(), needle);
  }
}

TEST_F(Malformed, HugeCounts) {
  expect_error(RawGguf().header(3, kHuge, 0).bytes(), "claims 4611686018427387904 tensors");
  expect_error(RawGguf().header(3, 0, kHuge).bytes(),
               "claims 4611686018427387904 metadata entries");
  expect_error(RawGguf().header(3, ~uint64_t{0}, ~uint64_t{0}).bytes(), "impossible");
  // A tensor count that passes the first bound but not once the metadata is consumed.
  RawGguf g;
  g.header(3, 3, 1).kv_str("k", std::string(60, 'x'));
  expect_error(g.bytes(), "claims 3 tensors");
}

TEST_F(Malformed, HugeStringLengths) {
  RawGguf key;
  key.header(3, 0, 1).u64(kHuge).fill(40);
  expect_error(key.bytes(), "key of metadata entry #0 at offset 24 claims a length of");
  RawGguf val;
  val.header(3, 0, 1).str("k").u32(8).u64(~uint64_t{0}).fill(40);
  expect_error(val.bytes(), "string value of key 'k'");
  RawGguf name;
  name.header(3, 1, 0).u64(kHuge).fill(40);
  expect_error(name.bytes(), "name of tensor #0");
}

TEST_F(Malformed, Arrays) {
  RawGguf huge;
  huge.header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(kHuge).fill(64);
  expect_error(
      huge.bytes(),
      "key 'tokenizer.ggml.tokens' claims an array of 4611686018427387904 string elements");
  RawGguf huge_u8;
  huge_u8.header(3, 0, 1).str("k").u32(9).u32(0).u64(100).fill(99);
  expect_error(huge_u8.bytes(), "cannot fit in the 99 bytes left");
  RawGguf nested;
  nested.header(3, 0, 1).str("k").u32(9).u32(9).u64(1).u32(4).u64(1).u32(7);
  expect_error(nested.bytes(), "nested arrays are not supported");
  RawGguf bad_elem;
  bad_elem.header(3, 0, 1).str("k").u32(9).u32(13).u64(1).u32(0);
  expect_error(bad_elem.bytes(), "invalid element type 13");
  RawGguf string_elem_cut;  // the second element's length lies past the end
  string_elem_cut.header(3, 0, 1).str("k").u32(9).u32(8).u64(2).str("ab").u64(50).fill(3);
  expect_error(string_elem_cut.bytes(), "element of array key 'k'");
}

TEST_F(Malformed, ValueTypesAndBools) {
  RawGguf bad_type;
  bad_type.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error(bad_type.bytes(), "key 'k' has invalid value type 13");
  RawGguf bad_type2;
  bad_type2.header(3, 0, 1).str("k").u32(0xffffffffu).u32(0);
  expect_error(bad_type2.bytes(), "invalid value type 4294967295");
  RawGguf bad_bool;
  bad_bool.header(3, 0, 1).str("k").u32(7).u8(2);
  expect_error(bad_bool.bytes(), "key 'k' holds bool byte 2");
}

TEST_F(Malformed, DuplicateKeyAndTensorName) {
  RawGguf dk;
  dk.header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  expect_error(dk.bytes(), "duplicate key 'a.b'");
  RawGguf dt;
  dt.header(3, 2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).fill(64);
  expect_error(dt.bytes(), "duplicate tensor name 'w'");
}

TEST_F(Malformed, Alignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    RawGguf g;
    g.header(3, 0, 1).kv_u32("general.alignment", a);
    expect_error(g.bytes(), "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  RawGguf wrong_type;
  wrong_type.header(3, 0, 1).str("general.alignment").u32(10).u64(32);
  expect_error(wrong_type.bytes(), "key general.alignment has type u64, expected u32");
}

TEST_F(Malformed, TensorShapes) {
  RawGguf five;
  five.header(3, 1, 0).tensor("t", {1, 1, 1, 1, 1}, kF32, 0).pad(32).fill(32);
  expect_error(five.bytes(), "tensor 't' has n_dims = 5 (at most 4)");
  RawGguf zero;
  zero.header(3, 1, 0).tensor("t", {4, 0}, kF32, 0).pad(32).fill(32);
  expect_error(zero.bytes(), "tensor 't' has ne[1] = 0");
  RawGguf neg;
  neg.header(3, 1, 0).tensor("t", {~uint64_t{0}}, kF32, 0).pad(32).fill(32);
  expect_error(neg.bytes(), "beyond int64");
  RawGguf product;  // 2^32 · 2^32 · 2^32 elements
  product.header(3, 1, 0)
      .tensor("t", {1ull << 32, 1ull << 32, 1ull << 32}, kF32, 0)
      .pad(32)
      .fill(32);
  expect_error(product.bytes(), "has too many elements");
  RawGguf bytes_overflow;  // 2^62 elements fit int64, 2^64 bytes of F32 do not fit u64
  bytes_overflow.header(3, 1, 0).tensor("t", {1ull << 31, 1ull << 31}, kF32, 0).pad(32).fill(32);
  expect_error(bytes_overflow.bytes(), "byte size that overflows");
  RawGguf block;
  block.header(3, 1, 0).tensor("blk.0.ffn_up_exps.weight", {100, 2}, kQ4_K, 0).pad(32).fill(300);
  expect_error(block.bytes(),
               "tensor 'blk.0.ffn_up_exps.weight' of type Q4_K has ne[0] = 100, not a multiple of "
               "its block size 256");
  RawGguf long_name;
  long_name.header(3, 1, 0).tensor(std::string(64, 'n'), {8}, kF32, 0).pad(32).fill(32);
  expect_error(long_name.bytes(), "has a name of 64 bytes");
}

TEST_F(Malformed, UnknownTypeIds) {
  for (uint32_t id : {4u, 5u, 31u, 40u, 1000u}) {
    RawGguf g;
    g.header(3, 1, 0).tensor("t", {32}, id, 0).pad(32).fill(128);
    expect_error(g.bytes(), "tensor 't' has unknown ggml type id " + std::to_string(id));
  }
}

TEST_F(Malformed, TensorPlacement) {
  // Data past the end: 'b' needs 34 bytes at offset 64, only 20 exist.
  RawGguf past;
  past.header(3, 2, 0)
      .tensor("a", {8, 2}, kF32, 0)
      .tensor("blk.3.ffn_up_exps.weight", {32}, kQ8_0, 64);
  past.pad(32);
  const uint64_t data_start = past.size();
  past.fill(64 + 20);
  const std::string msg = expect_error(past.bytes(), "tensor 'blk.3.ffn_up_exps.weight' data [");
  const std::string expected = fmt::format("[{}, {}) lies past end of file (size {})",
                                           data_start + 64, data_start + 98, data_start + 84);
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  RawGguf far;
  far.header(3, 1, 0).tensor("t", {8}, kF32, uint64_t{1} << 40).pad(32).fill(32);
  expect_error(far.bytes(), "lies past end of file");
  RawGguf wrap;  // offset + size wraps around 2^64
  wrap.header(3, 1, 0).tensor("t", {8}, kF32, ~uint64_t{31}).pad(32).fill(32);
  expect_error(wrap.bytes(), "overflows");
  RawGguf misaligned;
  misaligned.header(3, 1, 0).tensor("t", {8}, kF32, 16).pad(32).fill(64);
  expect_error(misaligned.bytes(), "tensor 't' offset 16 is not a multiple of the alignment 32");
  RawGguf overlap;  // 'b' starts inside 'a'
  overlap.header(3, 2, 0)
      .tensor("a", {16, 2}, kF32, 0)
      .tensor("b", {8}, kF32, 96)
      .pad(32)
      .fill(256);
  expect_error(overlap.bytes(), "tensors 'a'");
  RawGguf same;  // identical ranges
  same.header(3, 2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0).pad(32).fill(64);
  expect_error(same.bytes(), "overlap");
}

// Tensors may be stored out of declaration order (not packed as llama.cpp writes them): valid.
TEST_F(Malformed, OutOfOrderTensorsAreAccepted) {
  RawGguf g;
  g.header(3, 2, 1).kv_u32("general.alignment", 64);
  g.tensor("late", {8}, kF32, 64).tensor("early", {16}, kF32, 0).pad(64).fill(96, 5);
  const std::string path = dir_.path("ooo.gguf");
  write_bytes(path, g.bytes());
  const File f = File::open(path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.tensor("late").file_offset, f.data_offset() + 64);
}

}  // namespace
