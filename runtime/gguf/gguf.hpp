#pragma once
// GGUF v2/v3 reader (mmap) and streaming writer. The reader treats every file as hostile: every
// count, size, offset and product is checked for overflow and for lying inside the file before use;
// unknown type ids are rejected. Errors are ferry::Error(ErrorKind::format|io) naming the file.
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "runtime/core/types.hpp"

namespace ferry::gguf {

enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view value_type_name(ValueType t);

// An array value: element type + elements, stored widened by kind.
struct Array {
  ValueType elem_type = ValueType::u8;
  std::vector<int64_t> ints;          // u8..i64, bool (u64 stored bit-cast)
  std::vector<double> floats;         // f32, f64
  std::vector<std::string> strings;   // string
  uint64_t size() const;
  bool operator==(const Array&) const = default;
};

// A metadata value. Scalars keep their exact GGUF type (for round-trips).
struct Value {
  ValueType type = ValueType::u32;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  static Value u8(uint8_t x);   static Value i8(int8_t x);
  static Value u16(uint16_t x); static Value i16(int16_t x);
  static Value u32(uint32_t x); static Value i32(int32_t x);
  static Value u64(uint64_t x); static Value i64(int64_t x);
  static Value f32(float x);    static Value f64(double x);
  static Value boolean(bool x); static Value str(std::string x);
  static Value arr(Array a);
  static Value arr_str(std::vector<std::string> xs);
  static Value arr_i32(const std::vector<int32_t>& xs);
  static Value arr_u32(const std::vector<uint32_t>& xs);
  static Value arr_f32(const std::vector<float>& xs);
  static Value arr_bool(const std::vector<bool>& xs);
  bool operator==(const Value&) const = default;  // exact (NaN != NaN)
};

// "u32", "array[string]" ...: the type of a value as error messages and `ferry inspect` name it.
std::string value_type_string(const Value& v);
// Human-readable rendering; arrays longer than max_elems show their first elements and the count.
std::string value_to_string(const Value& v, size_t max_elems = 16);

struct TensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};  // ne[0] fastest (PyTorch shape reversed)
  std::array<uint64_t, 4> nb{0, 0, 0, 0};  // byte strides; nb[1] = row bytes
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // relative to the data section
  uint64_t file_offset = 0;  // absolute
  uint64_t n_bytes = 0;
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

struct ByteRange {
  uint64_t offset;  // absolute file offset
  uint64_t size;
};

class File {
 public:
  // mmap the file read-only and parse header, metadata and tensor table.
  static File open(const std::string& path);
  // A file described without its data: the metadata and tensor table a writer given these
  // declarations would produce (ne[0] fastest, offsets aligned in declaration order), nothing
  // mapped. For planning (`ferry plan` without a file): every size and accessor is the real
  // file's, but base() is null and data()/prefault()/release() must not be used.
  // ErrorKind::format for a shape or type a reader would reject, naming `label` and the tensor.
  struct TensorDecl {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<uint64_t> ne;  // 1..4 dims
  };
  static File describe(std::string label, std::vector<std::pair<std::string, Value>> metadata,
                       const std::vector<TensorDecl>& tensors, uint32_t alignment = 32);
  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  uint32_t alignment() const { return alignment_; }

  // --- metadata (keys in file order)
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed accessors: throw "key K missing in FILE" / "key K in FILE has type T, expected ...".
  // Integer accessors accept any integer type whose value fits.
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;  // accepts f32/f64
  bool get_bool(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::optional<uint32_t> get_u32_opt(std::string_view key) const;
  std::optional<float> get_f32_opt(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;
  std::string architecture() const { return get_string("general.architecture"); }

  // --- tensors (file order)
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws "tensor X missing in FILE"
  const uint8_t* data(const TensorInfo& t) const { return base_ + t.file_offset; }
  const uint8_t* base() const { return base_; }
  // Maps every page of the file now (Linux: MADV_POPULATE_READ, else the WILLNEED hint), as
  // llama.cpp's MAP_POPULATE does, for a model computed in place from the mapping: its first
  // tokens then take no page faults (with 4 KiB pages a 17 GiB file is over four million). Only
  // advice: nothing fails when the kernel declines.
  void prefault() const;
  // Hands the whole pages of [p, p + bytes) that lie in the mapping back to the OS (their contents
  // are read from the file again if touched): for tensors the engine copied elsewhere.
  void release(const void* p, size_t bytes) const;
  // Byte range of expert e inside a 3-D expert tensor {n_in, n_out, n_expert}: starts at e·nb[2].
  ByteRange expert_range(const TensorInfo& t, uint64_t expert) const;

 private:
  File() = default;
  void parse();
  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Streaming writer. Declare metadata and all tensors first, then write tensor data in declaration
// order (whole tensors or in pieces); finish() pads and atomically renames PATH.tmp → PATH. A writer
// destroyed without finish() removes the temporary file: nothing half-written is left behind.
class Writer {
 public:
  explicit Writer(std::string path, uint32_t alignment = 32);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void set(std::string key, Value v);  // replaces an existing key
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne);  // ne[0] fastest
  // Writes header, metadata and tensor table. Called implicitly by the first write_data.
  void write_header();
  // Appends bytes to the current tensor; moves to the next when it is complete. Errors when
  // more bytes are written than the tensor has.
  void write_data(const void* bytes, uint64_t n);
  void finish();
  uint64_t tensor_bytes(size_t i) const;
  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct Pending { std::string name; GgmlType type; std::vector<uint64_t> ne; uint64_t bytes; uint64_t offset; };
  struct FileCloser { void operator()(std::FILE* f) const; };
  void write_raw(const void* bytes, uint64_t n);
  void write_padding(uint64_t to_multiple_of);
  std::string path_, tmp_path_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Pending> tensors_;
  std::unique_ptr<std::FILE, FileCloser> f_;
  bool header_written_ = false, finished_ = false;
  size_t cur_ = 0;
  uint64_t cur_written_ = 0;
  uint64_t pos_ = 0;
};

}  // namespace ferry::gguf
