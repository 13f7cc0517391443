// Metadata values: constructors, type names and rendering.
#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8:
      return "u8";
    case ValueType::i8:
      return "i8";
    case ValueType::u16:
      return "u16";
    case ValueType::i16:
      return "i16";
    case ValueType::u32:
      return "u32";
    case ValueType::i32:
      return "i32";
    case ValueType::f32:
      return "f32";
    case ValueType::boolean:
      return "bool";
    case ValueType::string:
      return "string";
    case ValueType::array:
      return "array";
    case ValueType::u64:
      return "u64";
    case ValueType::i64:
      return "i64";
    case ValueType::f64:
      return "f64";
  }
  return "invalid";
}

uint64_t Array::size() const {
  switch (elem_type) {
    case ValueType::f32:
    case ValueType::f64:
      return floats.size();
    case ValueType::string:
      return strings.size();
    default:
      return ints.size();
  }
}

Value Value::u8(uint8_t x) {
  return {ValueType::u8, uint64_t{x}};
}
Value Value::i8(int8_t x) {
  return {ValueType::i8, int64_t{x}};
}
Value Value::u16(uint16_t x) {
  return {ValueType::u16, uint64_t{x}};
}
Value Value::i16(int16_t x) {
  return {ValueType::i16, int64_t{x}};
}
Value Value::u32(uint32_t x) {
  return {ValueType::u32, uint64_t{x}};
}
Value Value::i32(int32_t x) {
  return {ValueType::i32, int64_t{x}};
}
Value Value::u64(uint64_t x) {
  return {ValueType::u64, x};
}
Value Value::i64(int64_t x) {
  return {ValueType::i64, x};
}
Value Value::f32(float x) {
  return {ValueType::f32, double{x}};
}
Value Value::f64(double x) {
  return {ValueType::f64, x};
}
Value Value::boolean(bool x) {
  return {ValueType::boolean, x};
}
Value Value::str(std::string x) {
  return {ValueType::string, std::move(x)};
}

Value Value::arr(Array a) {
  if (a.elem_type == ValueType::array)
    fail(ErrorKind::invalid_arg, "GGUF arrays of arrays are not supported");
  return {ValueType::array, std::move(a)};
}

Value Value::arr_str(std::vector<std::string> xs) {
  Array a;
  a.elem_type = ValueType::string;
  a.strings = std::move(xs);
  return arr(std::move(a));
}

Value Value::arr_i32(const std::vector<int32_t>& xs) {
  Array a;
  a.elem_type = ValueType::i32;
  a.ints.assign(xs.begin(), xs.end());
  return arr(std::move(a));
}

Value Value::arr_u32(const std::vector<uint32_t>& xs) {
  Array a;
  a.elem_type = ValueType::u32;
  a.ints.assign(xs.begin(), xs.end());
  return arr(std::move(a));
}

Value Value::arr_f32(const std::vector<float>& xs) {
  Array a;
  a.elem_type = ValueType::f32;
  a.floats.assign(xs.begin(), xs.end());
  return arr(std::move(a));
}

Value Value::arr_bool(const std::vector<bool>& xs) {
  Array a;
  a.elem_type = ValueType::boolean;
  a.ints.assign(xs.begin(), xs.end());
  return arr(std::move(a));
}

std::string value_type_string(const Value& v) {
  if (v.type != ValueType::array) return std::string(value_type_name(v.type));
  const auto* a = std::get_if<Array>(&v.v);
  return fmt::format("array[{}]", a ? value_type_name(a->elem_type) : "?");
}

namespace {

// Shortest text that reads back as the same float (f32) or double (f64).
std::string format_float(double x, ValueType t) {
  if (t == ValueType::f32) return fmt::format("{}", static_cast<float>(x));
  return fmt::format("{}", x);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
  return out;
}

std::string array_elem(const Array& a, size_t i) {
  switch (a.elem_type) {
    case ValueType::f32:
    case ValueType::f64:
      return format_float(a.floats[i], a.elem_type);
    case ValueType::string:
      return quoted(a.strings[i]);
    case ValueType::boolean:
      return a.ints[i] ? "true" : "false";
    case ValueType::u64:
      return fmt::format("{}", static_cast<uint64_t>(a.ints[i]));
    default:
      return fmt::format("{}", a.ints[i]);
  }
}

}  // namespace

std::string value_to_string(const Value& v, size_t max_elems) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return fmt::format("{}", *u);
  if (const auto* i = std::get_if<int64_t>(&v.v)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v.v)) return format_float(*d, v.type);
  if (const auto* b = std::get_if<bool>(&v.v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v.v)) return quoted(*s);
  const auto& a = std::get<Array>(v.v);
  const uint64_t n = a.size();
  std::string out = "[";
  for (uint64_t i = 0; i < n && i < max_elems; ++i) {
    if (i) out += ", ";
    out += array_elem(a, i);
  }
  if (n > max_elems) out += fmt::format("{}... ({} elements)", max_elems ? ", " : "", n);
  out += "]";
  return out;
}

}  // namespace ferry::gguf
