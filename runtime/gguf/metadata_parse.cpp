// Parsing of metadata values (scalars, strings, arrays) from a hostile file.
#include "runtime/gguf/parse.hpp"

namespace ferry::gguf::detail {
namespace {

bool is_scalar_type(uint32_t t) {
  return t <= 12 && t != 8 && t != 9;
}

// Reads one scalar of `type` into the widest representation of its kind.
template <typename Sink>
void read_scalar(Cursor& c, uint32_t type, const std::string& key, std::string_view what,
                 Sink&& sink) {
  switch (static_cast<ValueType>(type)) {
    case ValueType::u8:
      sink(uint64_t{c.read<uint8_t>(what)});
      return;
    case ValueType::i8:
      sink(int64_t{c.read<int8_t>(what)});
      return;
    case ValueType::u16:
      sink(uint64_t{c.read<uint16_t>(what)});
      return;
    case ValueType::i16:
      sink(int64_t{c.read<int16_t>(what)});
      return;
    case ValueType::u32:
      sink(uint64_t{c.read<uint32_t>(what)});
      return;
    case ValueType::i32:
      sink(int64_t{c.read<int32_t>(what)});
      return;
    case ValueType::u64:
      sink(c.read<uint64_t>(what));
      return;
    case ValueType::i64:
      sink(c.read<int64_t>(what));
      return;
    case ValueType::f32:
      sink(double{c.read<float>(what)});
      return;
    case ValueType::f64:
      sink(c.read<double>(what));
      return;
    case ValueType::boolean: {
      // Stored as one byte; anything but 0/1 means the file is corrupt (and a bool holding another
      // bit pattern would be undefined behaviour in C++).
      const uint8_t b = c.read<uint8_t>(what);
      if (b > 1)
        fail(ErrorKind::format, "{}: key '{}' holds bool byte {} (expected 0 or 1) at offset {}",
             c.path(), key, b, c.pos() - 1);
      sink(b == 1);
      return;
    }
    default:
      break;
  }
  fail(ErrorKind::internal, "read_scalar called with non-scalar type {}", type);
}

Array read_array(Cursor& c, const std::string& key) {
  const uint32_t elem = c.read<uint32_t>(fmt::format("array element type of key '{}'", key));
  if (elem == static_cast<uint32_t>(ValueType::array))
    fail(ErrorKind::format, "{}: key '{}' is an array of arrays (nested arrays are not supported)",
         c.path(), key);
  if (elem > static_cast<uint32_t>(ValueType::f64))
    fail(ErrorKind::format, "{}: key '{}' is an array with invalid element type {}", c.path(), key,
         elem);
  const uint64_t count = c.read<uint64_t>(fmt::format("array length of key '{}'", key));
  // Bound the count by the bytes left before reserving anything.
  if (count > c.remaining() / min_encoded_bytes(elem))
    fail(ErrorKind::format,
         "{}: key '{}' claims an array of {} {} elements, which cannot fit in the {} bytes left",
         c.path(), key, count, value_type_name(static_cast<ValueType>(elem)), c.remaining());

  Array a;
  a.elem_type = static_cast<ValueType>(elem);
  // One description for all elements: formatting per element would dominate the parse of a
  // 250k-entry token list.
  const std::string what = fmt::format("element of array key '{}'", key);
  if (elem == static_cast<uint32_t>(ValueType::string)) {
    a.strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) a.strings.push_back(c.read_string(what));
  } else if (elem == static_cast<uint32_t>(ValueType::f32) ||
             elem == static_cast<uint32_t>(ValueType::f64)) {
    a.floats.reserve(count);
    for (uint64_t i = 0; i < count; ++i)
      read_scalar(c, elem, key, what, [&](auto x) { a.floats.push_back(static_cast<double>(x)); });
  } else {
    a.ints.reserve(count);
    // u64 elements are stored bit-cast into int64 (see Array).
    for (uint64_t i = 0; i < count; ++i)
      read_scalar(c, elem, key, what, [&](auto x) { a.ints.push_back(static_cast<int64_t>(x)); });
  }
  return a;
}

}  // namespace

uint64_t min_encoded_bytes(uint32_t type) {
  switch (static_cast<ValueType>(type)) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean:
      return 1;
    case ValueType::u16:
    case ValueType::i16:
      return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32:
      return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
    case ValueType::string:
      return 8;
    case ValueType::array:
      return 12;  // u32 element type + u64 count
  }
  return 1;
}

Value read_value(Cursor& c, uint32_t type, const std::string& key) {
  if (type == static_cast<uint32_t>(ValueType::string))
    return Value::str(c.read_string(fmt::format("string value of key '{}'", key)));
  if (type == static_cast<uint32_t>(ValueType::array)) {
    Value v;
    v.type = ValueType::array;
    v.v = read_array(c, key);
    return v;
  }
  if (!is_scalar_type(type))
    fail(ErrorKind::format, "{}: key '{}' has invalid value type {} at offset {}", c.path(), key,
         type, c.pos() - 4);
  Value v;
  v.type = static_cast<ValueType>(type);
  read_scalar(c, type, key, fmt::format("value of key '{}'", key), [&](auto x) { v.v = x; });
  return v;
}

}  // namespace ferry::gguf::detail
