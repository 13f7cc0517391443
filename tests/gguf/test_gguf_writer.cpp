// Writer contract: atomic finish, nothing left behind on failure, argument checks, I/O errors.
#include <signal.h>
#include <sys/resource.h>

#include "tests/gguf/gguf_test_util.hpp"

using namespace ferry;
using namespace ferry::gguf;
using namespace ferry::gguf::testing;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Writer, DestroyedWithoutFinishLeavesNothing) {
  ScratchDir dir;
  const std::string path = dir.path("w.gguf");
  {
    Writer w(path);
    w.set("a", Value::u32(1));
    w.add_tensor("t", GgmlType::F32, {64});
    std::vector<uint8_t> half(128, 7);
    w.write_data(half.data(), half.size());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
}

TEST(Writer, FailedWriteKeepsTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.path("keep.gguf");
  write_bytes(path, "previous contents");
  {
    Writer w(path);
    w.add_tensor("t", GgmlType::F16, {32, 2});
    std::vector<uint8_t> d(100, 1);  // 128 bytes declared
    w.write_data(d.data(), d.size());
    EXPECT_NE(error_of([&] {
                w.finish();
              }).find("finish() with tensor 't' incomplete (100 of 128 bytes written)"),
              std::string::npos);
  }
  EXPECT_EQ(read_bytes(path), "previous contents");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Writer, FinishReplacesAtomically) {
  ScratchDir dir;
  const std::string path = dir.path("replace.gguf");
  write_bytes(path, "old");
  std::mt19937 rng(11);
  const auto d = random_bytes(rng, 4 * 24);
  {
    Writer w(path);
    w.add_tensor("t", GgmlType::F32, {24});
    w.write_data(d.data(), d.size());
    EXPECT_EQ(read_bytes(path), "old");  // untouched until finish()
    w.finish();
    w.finish();  // idempotent
  }
  const File f = File::open(path);
  EXPECT_EQ(std::memcmp(f.data(f.tensor("t")), d.data(), d.size()), 0);
}

TEST(Writer, TooMuchDataIsAnError) {
  ScratchDir dir;
  Writer w(dir.path("much.gguf"));
  w.add_tensor("t", GgmlType::F32, {4});
  std::vector<uint8_t> d(20, 3);
  EXPECT_NE(
      error_of([&] { w.write_data(d.data(), d.size()); }).find("beyond the last declared tensor"),
      std::string::npos);
}

TEST(Writer, ArgumentChecks) {
  ScratchDir dir;
  EXPECT_NE(
      error_of([&] { Writer w(dir.path("a.gguf"), 3); }).find("alignment 3 is not a power of two"),
      std::string::npos);
  EXPECT_NE(error_of([&] { Writer w(dir.path("a.gguf"), 0); }).find("not a power of two"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Writer w(dir.path("no/such/dir.gguf")); }).find("cannot create"),
            std::string::npos);

  Writer w(dir.path("b.gguf"));
  w.add_tensor("t", GgmlType::Q8_0, {64});
  EXPECT_NE(error_of([&] { w.add_tensor("t", GgmlType::F32, {1}); }).find("duplicate tensor 't'"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { w.add_tensor("u", GgmlType::Q4_K, {100}); }).find("not a multiple of 256"),
      std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("v", GgmlType::F32, {}); }).find("0 dimensions"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.add_tensor("v", GgmlType::F32, {1, 1, 1, 1, 1});
            }).find("5 dimensions"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.add_tensor("v", GgmlType::F32, {4, 0});
            }).find("ne[1] = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.add_tensor("v", static_cast<GgmlType>(4), {32});
            }).find("invalid type id 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.add_tensor(std::string(64, 'x'), GgmlType::F32, {1});
            }).find("longer than 63"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.add_tensor("huge", GgmlType::F32, {1ull << 40, 1ull << 30});
            }).find("too large"),
            std::string::npos);
  EXPECT_EQ(w.tensor_bytes(0), 68u);  // two Q8_0 blocks
  EXPECT_NE(error_of([&] { w.tensor_bytes(1); }).find("out of range"), std::string::npos);

  Value inconsistent;  // type says u8 but the value does not fit
  inconsistent.type = ValueType::u8;
  inconsistent.v = uint64_t{300};
  w.set("bad", inconsistent);
  EXPECT_NE(error_of([&] { w.write_header(); }).find("value out of range for u8"),
            std::string::npos);
}

TEST(Writer, AlignmentKeyMustMatch) {
  ScratchDir dir;
  Writer w(dir.path("al.gguf"), 64);
  w.set("general.alignment", Value::u32(32));
  EXPECT_NE(
      error_of([&] { w.finish(); }).find("general.alignment is 32 but the writer aligns to 64"),
      std::string::npos);
  Writer ok(dir.path("al2.gguf"), 64);
  ok.set("general.alignment", Value::u32(64));
  ok.finish();
  const File f = File::open(dir.path("al2.gguf"));
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.metadata().size(), 1u);  // not added twice
}

TEST(Writer, SetReplacesAndLateChangesAreErrors) {
  ScratchDir dir;
  const std::string path = dir.path("late.gguf");
  Writer w(path);
  w.set("k", Value::u32(1));
  w.set("k", Value::str("two"));
  w.add_tensor("t", GgmlType::F32, {1});
  const float x = 1.5f;
  w.write_data(&x, sizeof x);
  EXPECT_NE(error_of([&] { w.set("k2", Value::u32(1)); }).find("after the header was written"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.add_tensor("t2", GgmlType::F32, {1});
            }).find("after the header was written"),
            std::string::npos);
  w.finish();
  const File f = File::open(path);
  ASSERT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.get_string("k"), "two");
}

// Disk full, simulated with a file-size limit (EFBIG instead of ENOSPC; the same code path).
TEST(Writer, IoFailureNamesThePathAndCleansUp) {
  ScratchDir dir;
  const std::string path = dir.path("full.gguf");
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  ErrorKind kind = ErrorKind::internal;
  {
    Writer w(path);
    w.add_tensor("big", GgmlType::F32, {1 << 20});  // 4 MiB
    std::vector<uint8_t> chunk(256 * 1024, 0x5a);
    try {
      for (int i = 0; i < 16; ++i) w.write_data(chunk.data(), chunk.size());
      w.finish();
    } catch (const Error& e) {
      msg = e.what();
      kind = e.kind();
    }
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(kind, ErrorKind::io) << msg;
  EXPECT_NE(msg.find(path + ".tmp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("writing"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
