// Writer → reader round trips: every value type, every array type, tensors of several types and
// shapes, alignments 1/32/64, strides, expert ranges, typed accessors.
#include <cmath>
#include <limits>

#include "tests/gguf/gguf_test_util.hpp"

using namespace ferry;
using namespace ferry::gguf;
using namespace ferry::gguf::testing;

namespace {

// Every scalar type at its extremes plus arrays of every element type.
std::vector<std::pair<std::string, Value>> all_values(std::mt19937& rng) {
  std::uniform_real_distribution<float> uf(-1e6f, 1e6f);
  std::vector<std::pair<std::string, Value>> kv = {
      {"general.architecture", Value::str("testarch")},
      {"t.u8", Value::u8(255)},
      {"t.i8", Value::i8(-128)},
      {"t.u16", Value::u16(65535)},
      {"t.i16", Value::i16(-32768)},
      {"t.u32", Value::u32(4000000000u)},
      {"t.i32", Value::i32(-2000000000)},
      {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max() - 7)},
      {"t.i64", Value::i64(std::numeric_limits<int64_t>::min() + 3)},
      {"t.f32", Value::f32(uf(rng))},
      {"t.f32_denormal", Value::f32(std::numeric_limits<float>::denorm_min())},
      {"t.f64", Value::f64(-1.0 / 3.0)},
      {"t.bool_true", Value::boolean(true)},
      {"t.bool_false", Value::boolean(false)},
      {"t.str", Value::str("héllo wörld ✓")},
      {"t.str_empty", Value::str("")},
      {"t.str_nul", Value::str(std::string("a\0b", 3))},
      {"t.arr_str", Value::arr_str({"x", "", "yz", "<|im_start|>"})},
      {"t.arr_i32", Value::arr_i32({-1, 0, 7, std::numeric_limits<int32_t>::min()})},
      {"t.arr_u32", Value::arr_u32({0, 1, std::numeric_limits<uint32_t>::max()})},
      {"t.arr_f32", Value::arr_f32({uf(rng), uf(rng), -0.0f, 1e-30f})},
      {"t.arr_bool", Value::arr_bool({true, false, true})},
      {"t.arr_empty", Value::arr_i32({})},
  };
  // The remaining element types through Array directly.
  const std::pair<ValueType, std::vector<int64_t>> int_arrays[] = {
      {ValueType::u8, {0, 200, 255}},
      {ValueType::i8, {-128, 5, 127}},
      {ValueType::u16, {65535, 1}},
      {ValueType::i16, {-32768, 32767}},
      {ValueType::i64, {std::numeric_limits<int64_t>::min(), 42}},
      // u64 elements are stored bit-cast: -1 is 2^64 - 1.
      {ValueType::u64, {-1, 3, std::numeric_limits<int64_t>::max()}},
  };
  for (const auto& [t, xs] : int_arrays) {
    Array a;
    a.elem_type = t;
    a.ints = xs;
    kv.emplace_back("t.arr_" + std::string(value_type_name(t)), Value::arr(a));
  }
  Array f64s;
  f64s.elem_type = ValueType::f64;
  f64s.floats = {1e300, -2.5, 1.0 / 7.0};
  kv.emplace_back("t.arr_f64", Value::arr(f64s));
  return kv;
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;
};

const std::vector<TensorSpec> kTensors = {
    {"token_embd.weight", GgmlType::F32, {7, 3}},
    {"output_norm.weight", GgmlType::F16, {16}},
    {"blk.0.ffn_up_exps.weight", GgmlType::Q8_0, {64, 2, 3}},
    {"blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {256, 2, 4}},
    {"blk.0.attn_q.weight", GgmlType::Q6_K, {512, 3}},
    {"blk.0.four_d", GgmlType::BF16, {5, 1, 2, 3}},
    {"blk.0.odd", GgmlType::F32, {1}},
};

class RoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RoundTrip, MetadataTensorsAndData) {
  const uint32_t alignment = GetParam();
  ScratchDir dir;
  std::mt19937 rng(1234 + alignment);
  const auto kv = all_values(rng);
  const std::string path = dir.path("rt.gguf");

  std::vector<std::vector<uint8_t>> data;
  {
    Writer w(path, alignment);
    for (const auto& [k, v] : kv) w.set(k, v);
    for (const auto& t : kTensors) w.add_tensor(t.name, t.type, t.ne);
    for (size_t i = 0; i < kTensors.size(); ++i) {
      data.push_back(random_bytes(rng, w.tensor_bytes(i)));
      w.write_data(data.back().data(), data.back().size());
    }
    w.finish();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const File f = File::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  EXPECT_EQ(f.file_size(), fs::file_size(path));
  EXPECT_EQ(f.architecture(), "testarch");

  // Metadata: same keys, same order, same exact values; general.alignment appended when != 32.
  auto expected = kv;
  if (alignment != 32) expected.emplace_back("general.alignment", Value::u32(alignment));
  ASSERT_EQ(f.metadata().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, expected[i].first);
    EXPECT_TRUE(f.metadata()[i].second == expected[i].second)
        << expected[i].first << ": " << value_to_string(f.metadata()[i].second) << " vs "
        << value_to_string(expected[i].second);
  }

  ASSERT_EQ(f.tensors().size(), kTensors.size());
  for (size_t i = 0; i < kTensors.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    const TensorSpec& s = kTensors[i];
    SCOPED_TRACE(s.name);
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.type, s.type);
    EXPECT_EQ(t.n_dims, s.ne.size());
    uint64_t n_el = 1;
    for (size_t d = 0; d < 4; ++d) {
      EXPECT_EQ(t.ne[d], d < s.ne.size() ? s.ne[d] : 1u);
      n_el *= t.ne[d];
    }
    EXPECT_EQ(t.n_elements(), n_el);
    const TypeInfo& ti = type_info(s.type);
    EXPECT_EQ(t.nb[0], ti.block_bytes);
    EXPECT_EQ(t.nb[1], row_bytes(s.type, s.ne[0]));
    EXPECT_EQ(t.nb[2], t.nb[1] * t.ne[1]);
    EXPECT_EQ(t.nb[3], t.nb[2] * t.ne[2]);
    EXPECT_EQ(t.n_bytes, t.nb[3] * t.ne[3]);
    EXPECT_EQ(t.n_bytes, data[i].size());
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(t.file_offset, f.data_offset() + t.offset);
    EXPECT_EQ(std::memcmp(f.data(t), data[i].data(), t.n_bytes), 0);
    EXPECT_EQ(&f.tensor(s.name), &t);
  }
  // Tensors are packed in order with alignment padding, as llama.cpp requires.
  for (size_t i = 1; i < f.tensors().size(); ++i) {
    const auto& prev = f.tensors()[i - 1];
    EXPECT_EQ(f.tensors()[i].offset,
              (prev.offset + prev.n_bytes + alignment - 1) / alignment * alignment);
  }
  // The file ends padded after the last tensor.
  EXPECT_EQ(f.file_size() % alignment, 0u);
}

INSTANTIATE_TEST_SUITE_P(Alignments, RoundTrip, ::testing::Values(1u, 32u, 64u));

TEST(RoundTrip, PiecewiseWritesGiveTheSameFile) {
  ScratchDir dir;
  std::mt19937 rng(99);
  std::vector<std::vector<uint8_t>> data;
  auto declare = [&](Writer& w) {
    w.set("general.architecture", Value::str("x"));
    for (const auto& t : kTensors) w.add_tensor(t.name, t.type, t.ne);
  };
  {
    Writer w(dir.path("whole.gguf"));
    declare(w);
    for (size_t i = 0; i < w.n_tensors(); ++i) {
      data.push_back(random_bytes(rng, w.tensor_bytes(i)));
      w.write_data(data[i].data(), data[i].size());
    }
    w.finish();
  }
  {
    // One stream of all tensor bytes cut at random points, crossing tensor boundaries.
    std::vector<uint8_t> all;
    for (const auto& d : data) all.insert(all.end(), d.begin(), d.end());
    Writer w(dir.path("pieces.gguf"));
    declare(w);
    size_t pos = 0;
    while (pos < all.size()) {
      const size_t n = std::min<size_t>(all.size() - pos, 1 + rng() % 300);
      w.write_data(all.data() + pos, n);
      pos += n;
    }
    w.finish();
  }
  EXPECT_EQ(read_bytes(dir.path("whole.gguf")), read_bytes(dir.path("pieces.gguf")));
}

TEST(RoundTrip, Version2ReadsLikeVersion3) {
  ScratchDir dir;
  std::mt19937 rng(5);
  {
    Writer w(dir.path("v3.gguf"));
    w.set("a.b", Value::u32(17));
    w.add_tensor("t", GgmlType::F32, {8, 2});
    const auto d = random_bytes(rng, w.tensor_bytes(0));
    w.write_data(d.data(), d.size());
    w.finish();
  }
  std::string bytes = read_bytes(dir.path("v3.gguf"));
  bytes[4] = 2;
  write_bytes(dir.path("v2.gguf"), bytes);
  const File v2 = File::open(dir.path("v2.gguf"));
  const File v3 = File::open(dir.path("v3.gguf"));
  EXPECT_EQ(v2.version(), 2u);
  EXPECT_EQ(v2.get_u32("a.b"), 17u);
  EXPECT_EQ(v2.tensor("t").file_offset, v3.tensor("t").file_offset);
  EXPECT_EQ(std::memcmp(v2.data(v2.tensor("t")), v3.data(v3.tensor("t")), 64), 0);
}

TEST(ExpertRange, SlicesOneExpert) {
  ScratchDir dir;
  std::mt19937 rng(7);
  const std::string path = dir.path("experts.gguf");
  std::vector<uint8_t> bytes;
  {
    Writer w(path, 64);
    w.add_tensor("blk.0.ffn_norm.weight", GgmlType::F32, {32});
    w.add_tensor("blk.0.ffn_gate_exps.weight", GgmlType::Q8_0,
                 {64, 5, 6});  // {n_in, n_out, n_expert}
    const auto norm = random_bytes(rng, w.tensor_bytes(0));
    bytes = random_bytes(rng, w.tensor_bytes(1));
    w.write_data(norm.data(), norm.size());
    w.write_data(bytes.data(), bytes.size());
    w.finish();
  }
  const File f = File::open(path);
  const TensorInfo& t = f.tensor("blk.0.ffn_gate_exps.weight");
  const uint64_t expert_bytes = 5 * 2 * 34;  // 5 rows of 2 Q8_0 blocks
  ASSERT_EQ(t.nb[2], expert_bytes);
  for (uint64_t e = 0; e < 6; ++e) {
    const ByteRange r = f.expert_range(t, e);
    EXPECT_EQ(r.offset, t.file_offset + e * expert_bytes);
    EXPECT_EQ(r.size, expert_bytes);
    EXPECT_EQ(std::memcmp(f.base() + r.offset, bytes.data() + e * expert_bytes, expert_bytes), 0);
  }
  EXPECT_THROW(f.expert_range(t, 6), Error);
  try {
    f.expert_range(f.tensor("blk.0.ffn_norm.weight"), 0);
    ADD_FAILURE() << "expected an error for a 1-D tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3-D"), std::string::npos) << e.what();
  }
}

class Accessors : public ::testing::Test {
 protected:
  void SetUp() override {
    Writer w(dir_.path("acc.gguf"));
    w.set("k.u8", Value::u8(200));
    w.set("k.i32_neg", Value::i32(-5));
    w.set("k.i32_pos", Value::i32(12345));
    w.set("k.u64_big", Value::u64(uint64_t{1} << 40));
    w.set("k.u64_huge", Value::u64(~uint64_t{0}));
    w.set("k.f32", Value::f32(0.125f));
    w.set("k.f64", Value::f64(1e-6));
    w.set("k.bool", Value::boolean(true));
    w.set("k.str", Value::str("qwen35moe"));
    w.set("k.arr_str", Value::arr_str({"a", "b"}));
    w.set("k.arr_i32", Value::arr_i32({11, 11, 10, 0}));
    w.set("k.arr_f32", Value::arr_f32({0.5f, -1.5f}));
    Array u64s;
    u64s.elem_type = ValueType::u64;
    u64s.ints = {1, -1};
    w.set("k.arr_u64_huge", Value::arr(u64s));
    w.finish();
    file_ = std::make_unique<File>(File::open(dir_.path("acc.gguf")));
  }
  std::string error_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  ScratchDir dir_;
  std::unique_ptr<File> file_;
};

TEST_F(Accessors, IntegersWidenWhenTheValueFits) {
  const File& f = *file_;
  EXPECT_EQ(f.get_u32("k.u8"), 200u);
  EXPECT_EQ(f.get_u32("k.i32_pos"), 12345u);
  EXPECT_EQ(f.get_i64("k.i32_neg"), -5);
  EXPECT_EQ(f.get_u64("k.u64_big"), uint64_t{1} << 40);
  EXPECT_EQ(f.get_u64("k.u64_huge"), ~uint64_t{0});
  EXPECT_EQ(f.get_u32_opt("k.u8"), 200u);
  EXPECT_EQ(f.get_u32_opt("k.absent"), std::nullopt);
}

TEST_F(Accessors, OutOfRangeAndWrongTypesAreErrors) {
  const File& f = *file_;
  const std::string p = f.path();
  EXPECT_EQ(error_of([&] { f.get_u32("k.i32_neg"); }),
            "key k.i32_neg in " + p + " has value -5, out of range for u32");
  EXPECT_NE(error_of([&] { f.get_u32("k.u64_big"); }).find("out of range for u32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.get_i64("k.u64_huge"); }).find("out of range for i64"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { f.get_u32("k.str"); }),
            "key k.str in " + p + " has type string, expected an integer (u32)");
  EXPECT_EQ(error_of([&] { f.get_u32("k.f32"); }),
            "key k.f32 in " + p + " has type f32, expected an integer (u32)");
  EXPECT_EQ(error_of([&] { f.get_string("k.u8"); }),
            "key k.u8 in " + p + " has type u8, expected string");
  EXPECT_EQ(error_of([&] { f.get_bool("k.i32_pos"); }),
            "key k.i32_pos in " + p + " has type i32, expected bool");
  EXPECT_EQ(error_of([&] { f.get_f32("k.str"); }),
            "key k.str in " + p + " has type string, expected f32 or f64");
  EXPECT_EQ(error_of([&] { f.get_string_array("k.arr_i32"); }),
            "key k.arr_i32 in " + p + " has type array[i32], expected array[string]");
  EXPECT_EQ(error_of([&] { f.get_int_array("k.arr_str"); }),
            "key k.arr_str in " + p + " has type array[string], expected an array of integers");
  EXPECT_EQ(error_of([&] { f.get_f32_array("k.u8"); }),
            "key k.u8 in " + p + " has type u8, expected array[f32]");
  EXPECT_NE(error_of([&] { f.get_int_array("k.arr_u64_huge"); }).find("out of range for i64"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { f.get_u32("qwen35moe.expert_count"); }),
            "key qwen35moe.expert_count missing in " + p);
  EXPECT_EQ(error_of([&] { f.get_string_opt("k.u8"); }),
            "key k.u8 in " + p + " has type u8, expected string");
  EXPECT_EQ(error_of([&] { f.tensor("blk.0.attn_q.weight"); }),
            "tensor blk.0.attn_q.weight missing in " + p);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST_F(Accessors, FloatsStringsAndArrays) {
  const File& f = *file_;
  EXPECT_EQ(f.get_f32("k.f32"), 0.125f);
  EXPECT_EQ(f.get_f32("k.f64"), 1e-6f);
  EXPECT_EQ(f.get_f32_opt("k.absent"), std::nullopt);
  EXPECT_TRUE(f.get_bool("k.bool"));
  EXPECT_EQ(f.get_string("k.str"), "qwen35moe");
  EXPECT_EQ(f.get_string_opt("k.str"), "qwen35moe");
  EXPECT_EQ(f.get_string_array("k.arr_str"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.get_int_array("k.arr_i32"), (std::vector<int64_t>{11, 11, 10, 0}));
  EXPECT_EQ(f.get_f32_array("k.arr_f32"), (std::vector<float>{0.5f, -1.5f}));
  EXPECT_TRUE(f.has("k.bool"));
  EXPECT_FALSE(f.has("k.absent"));
  EXPECT_EQ(value_to_string(*f.find("k.arr_i32")), "[11, 11, 10, 0]");
  EXPECT_EQ(value_to_string(*f.find("k.arr_i32"), 2), "[11, 11, ... (4 elements)]");
}

TEST(FileMove, KeepsTheMappingAlive) {
  ScratchDir dir;
  std::mt19937 rng(3);
  std::vector<uint8_t> d;
  {
    Writer w(dir.path("m.gguf"));
    w.set("x", Value::u32(1));
    w.add_tensor("t", GgmlType::F16, {32, 3});
    d = random_bytes(rng, w.tensor_bytes(0));
    w.write_data(d.data(), d.size());
    w.finish();
  }
  File a = File::open(dir.path("m.gguf"));
  File b = std::move(a);
  EXPECT_EQ(std::memcmp(b.data(b.tensor("t")), d.data(), d.size()), 0);
  File c = File::open(dir.path("m.gguf"));
  c = std::move(b);
  EXPECT_EQ(std::memcmp(c.data(c.tensor("t")), d.data(), d.size()), 0);
  EXPECT_EQ(c.get_u32("x"), 1u);
}

}  // namespace
