// File: typed metadata accessors, tensor lookup and expert byte ranges.
#include <limits>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::gguf {
namespace {

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::u16:
    case ValueType::i16:
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::u64:
    case ValueType::i64:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& v,
                             std::string_view expected) {
  fail(ErrorKind::format, "key {} in {} has type {}, expected {}", key, path, value_type_string(v),
       expected);
}

// Value of an integer key as a signed 128-bit quantity, so that every range check is exact.
__int128 integer_value(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  return std::get<int64_t>(v.v);
}

template <typename T>
T checked_integer(const std::string& path, std::string_view key, const Value& v,
                  std::string_view type_name) {
  if (!is_integer(v.type)) wrong_type(path, key, v, fmt::format("an integer ({})", type_name));
  const __int128 x = integer_value(v);
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
    fail(ErrorKind::format, "key {} in {} has value {}, out of range for {}", key, path,
         value_to_string(v), type_name);
  return static_cast<T>(x);
}

const Array& array_of(const std::string& path, std::string_view key, const Value& v,
                      std::string_view expected) {
  if (v.type != ValueType::array) wrong_type(path, key, v, expected);
  return std::get<Array>(v.v);
}

}  // namespace

const Value* File::find(std::string_view key) const {
  // Heterogeneous lookup needs a transparent hash; the key sets are small, so copy instead.
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {

const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) fail(ErrorKind::format, "key {} missing in {}", key, f.path());
  return *v;
}

}  // namespace

uint32_t File::get_u32(std::string_view key) const {
  return checked_integer<uint32_t>(path_, key, require(*this, key), "u32");
}

uint64_t File::get_u64(std::string_view key) const {
  return checked_integer<uint64_t>(path_, key, require(*this, key), "u64");
}

int64_t File::get_i64(std::string_view key) const {
  return checked_integer<int64_t>(path_, key, require(*this, key), "i64");
}

float File::get_f32(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::f32 && v.type != ValueType::f64) wrong_type(path_, key, v, "f32 or f64");
  return static_cast<float>(std::get<double>(v.v));
}

bool File::get_bool(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::boolean) wrong_type(path_, key, v, "bool");
  return std::get<bool>(v.v);
}

std::string File::get_string(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::string) wrong_type(path_, key, v, "string");
  return std::get<std::string>(v.v);
}

std::vector<std::string> File::get_string_array(std::string_view key) const {
  const Value& v = require(*this, key);
  const Array& a = array_of(path_, key, v, "array[string]");
  if (a.elem_type != ValueType::string) wrong_type(path_, key, v, "array[string]");
  return a.strings;
}

std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const Value& v = require(*this, key);
  const Array& a = array_of(path_, key, v, "an array of integers");
  if (!is_integer(a.elem_type)) wrong_type(path_, key, v, "an array of integers");
  if (a.elem_type == ValueType::u64) {
    // u64 elements are stored bit-cast: a negative value here is one above INT64_MAX.
    for (size_t i = 0; i < a.ints.size(); ++i)
      if (a.ints[i] < 0)
        fail(ErrorKind::format, "key {} in {}: element {} = {} is out of range for i64", key, path_,
             i, static_cast<uint64_t>(a.ints[i]));
  }
  return a.ints;
}

std::vector<float> File::get_f32_array(std::string_view key) const {
  const Value& v = require(*this, key);
  const Array& a = array_of(path_, key, v, "array[f32]");
  if (a.elem_type != ValueType::f32 && a.elem_type != ValueType::f64)
    wrong_type(path_, key, v, "array[f32] or array[f64]");
  return std::vector<float>(a.floats.begin(), a.floats.end());
}

std::optional<uint32_t> File::get_u32_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_u32(key);
}

std::optional<float> File::get_f32_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_f32(key);
}

std::optional<std::string> File::get_string_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail(ErrorKind::format, "tensor {} missing in {}", name, path_);
  return *t;
}

ByteRange File::expert_range(const TensorInfo& t, uint64_t expert) const {
  if (t.n_dims != 3)
    fail(ErrorKind::invalid_arg,
         "{}: tensor '{}' has {} dimensions; expert ranges need a 3-D tensor", path_, t.name,
         t.n_dims);
  if (expert >= t.ne[2])
    fail(ErrorKind::invalid_arg, "{}: expert {} out of range for tensor '{}' ({} experts)", path_,
         expert, t.name, t.ne[2]);
  // Cannot overflow: expert < ne[2] and nb[2] * ne[2] = n_bytes was checked at parse time.
  return {t.file_offset + expert * t.nb[2], t.nb[2]};
}

}  // namespace ferry::gguf
