// Streaming GGUF v3 writer. Layout, as llama.cpp and the gguf Python package write it:
//   header | KVs | tensor infos | zero pad to alignment | tensor 0 | pad | tensor 1 | pad | ...
// where every tensor's data, including the last, is padded to a multiple of the alignment.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr size_t kMaxNameBytes = 63;  // see tensor_parse.cpp

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// Serialises metadata into a byte buffer (small; written in one go by write_header).
class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}

  template <typename T>
  void put(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_ += s;
  }

  // An integer of GGUF type t from its widened form, range-checked (a hand-built Value may hold
  // anything).
  void put_int(ValueType t, __int128 x, const std::string& key) {
    auto check = [&](auto lo, auto hi) {
      if (x < static_cast<__int128>(lo) || x > static_cast<__int128>(hi))
        fail(ErrorKind::invalid_arg, "GGUF key '{}': value out of range for {}", key,
             value_type_name(t));
    };
    switch (t) {
      case ValueType::u8:
        check(0, UINT8_MAX);
        put<uint8_t>(static_cast<uint8_t>(x));
        return;
      case ValueType::i8:
        check(INT8_MIN, INT8_MAX);
        put<int8_t>(static_cast<int8_t>(x));
        return;
      case ValueType::u16:
        check(0, UINT16_MAX);
        put<uint16_t>(static_cast<uint16_t>(x));
        return;
      case ValueType::i16:
        check(INT16_MIN, INT16_MAX);
        put<int16_t>(static_cast<int16_t>(x));
        return;
      case ValueType::u32:
        check(0, UINT32_MAX);
        put<uint32_t>(static_cast<uint32_t>(x));
        return;
      case ValueType::i32:
        check(INT32_MIN, INT32_MAX);
        put<int32_t>(static_cast<int32_t>(x));
        return;
      case ValueType::u64:
        check(0, UINT64_MAX);
        put<uint64_t>(static_cast<uint64_t>(x));
        return;
      case ValueType::i64:
        check(INT64_MIN, INT64_MAX);
        put<int64_t>(static_cast<int64_t>(x));
        return;
      case ValueType::boolean:
        check(0, 1);
        put<uint8_t>(static_cast<uint8_t>(x));
        return;
      default:
        break;
    }
    fail(ErrorKind::invalid_arg, "GGUF key '{}': {} is not an integer type", key,
         value_type_name(t));
  }

  void put_float(ValueType t, double x) {
    if (t == ValueType::f32)
      put<float>(static_cast<float>(x));
    else
      put<double>(x);
  }

  void put_value(const std::string& key, const Value& v) {
    put<uint32_t>(static_cast<uint32_t>(v.type));
    auto mismatch = [&]() {
      fail(ErrorKind::invalid_arg,
           "GGUF key '{}': value of type {} holds the wrong C++ alternative", key,
           value_type_name(v.type));
    };
    switch (v.type) {
      case ValueType::f32:
      case ValueType::f64:
        if (const auto* d = std::get_if<double>(&v.v)) return put_float(v.type, *d);
        return mismatch();
      case ValueType::boolean:
        if (const auto* b = std::get_if<bool>(&v.v)) return put<uint8_t>(*b ? 1 : 0);
        return mismatch();
      case ValueType::string:
        if (const auto* s = std::get_if<std::string>(&v.v)) return put_string(*s);
        return mismatch();
      case ValueType::array:
        if (const auto* a = std::get_if<Array>(&v.v)) return put_array(key, *a);
        return mismatch();
      default:
        if (const auto* u = std::get_if<uint64_t>(&v.v)) return put_int(v.type, *u, key);
        if (const auto* i = std::get_if<int64_t>(&v.v)) return put_int(v.type, *i, key);
        return mismatch();
    }
  }

 private:
  void put_array(const std::string& key, const Array& a) {
    put<uint32_t>(static_cast<uint32_t>(a.elem_type));
    put<uint64_t>(a.size());
    switch (a.elem_type) {
      case ValueType::array:
        fail(ErrorKind::invalid_arg, "GGUF key '{}': arrays of arrays are not supported", key);
      case ValueType::string:
        for (const auto& s : a.strings) put_string(s);
        return;
      case ValueType::f32:
      case ValueType::f64:
        for (double x : a.floats) put_float(a.elem_type, x);
        return;
      case ValueType::u64:
        // u64 elements are stored bit-cast in int64.
        for (int64_t x : a.ints) put<uint64_t>(static_cast<uint64_t>(x));
        return;
      default:
        for (int64_t x : a.ints) put_int(a.elem_type, x, key);
        return;
    }
  }

  std::string& out_;
};

}  // namespace

void Writer::FileCloser::operator()(std::FILE* f) const {
  std::fclose(f);
}

Writer::Writer(std::string path, uint32_t alignment)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), alignment_(alignment) {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
    fail(ErrorKind::invalid_arg, "{}: alignment {} is not a power of two", path_, alignment_);
  f_.reset(std::fopen(tmp_path_.c_str(), "wb"));
  if (!f_) fail(ErrorKind::io, "cannot create {}: {}", tmp_path_, std::strerror(errno));
}

Writer::~Writer() {
  if (finished_) return;
  f_.reset();
  ::unlink(tmp_path_.c_str());
}

void Writer::set(std::string key, Value v) {
  if (header_written_)
    fail(ErrorKind::invalid_arg, "{}: metadata key '{}' set after the header was written", path_,
         key);
  if (v.type == ValueType::array && !std::holds_alternative<Array>(v.v))
    fail(ErrorKind::invalid_arg, "{}: key '{}' has type array but holds no Array", path_, key);
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne) {
  if (header_written_)
    fail(ErrorKind::invalid_arg, "{}: tensor '{}' added after the header was written", path_, name);
  if (name.size() > kMaxNameBytes)
    fail(ErrorKind::invalid_arg, "{}: tensor name '{}' is longer than {} bytes", path_, name,
         kMaxNameBytes);
  for (const auto& t : tensors_)
    if (t.name == name) fail(ErrorKind::invalid_arg, "{}: duplicate tensor '{}'", path_, name);
  if (ne.empty() || ne.size() > 4)
    fail(ErrorKind::invalid_arg, "{}: tensor '{}' has {} dimensions (1 to 4 allowed)", path_, name,
         ne.size());
  const auto info = type_info(static_cast<uint32_t>(type));
  if (!info)
    fail(ErrorKind::invalid_arg, "{}: tensor '{}' has invalid type id {}", path_, name,
         static_cast<uint32_t>(type));
  uint64_t rows = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] == 0 || ne[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(ErrorKind::invalid_arg, "{}: tensor '{}' has ne[{}] = {}", path_, name, i, ne[i]);
    if (i > 0 && __builtin_mul_overflow(rows, ne[i], &rows))
      fail(ErrorKind::invalid_arg, "{}: tensor '{}' is too large", path_, name);
  }
  if (ne[0] % info->block_values != 0)
    fail(ErrorKind::invalid_arg, "{}: tensor '{}' of type {} has ne[0] = {}, not a multiple of {}",
         path_, name, info->name, ne[0], info->block_values);
  uint64_t bytes = 0, offset = 0, end = 0;
  if (__builtin_mul_overflow(row_bytes(type, ne[0]), rows, &bytes))
    fail(ErrorKind::invalid_arg, "{}: tensor '{}' is too large", path_, name);
  if (!tensors_.empty()) {
    const Pending& prev = tensors_.back();
    offset = align_up(prev.offset + prev.bytes, alignment_);
  }
  if (__builtin_add_overflow(offset, bytes, &end) || end > std::numeric_limits<uint64_t>::max() / 2)
    fail(ErrorKind::invalid_arg, "{}: tensor '{}' puts the data section beyond 2^63 bytes", path_,
         name);
  tensors_.push_back({std::move(name), type, std::move(ne), bytes, offset});
}

uint64_t Writer::tensor_bytes(size_t i) const {
  if (i >= tensors_.size())
    fail(ErrorKind::invalid_arg, "{}: tensor index {} out of range ({} tensors)", path_, i,
         tensors_.size());
  return tensors_[i].bytes;
}

void Writer::write_raw(const void* bytes, uint64_t n) {
  if (!f_) fail(ErrorKind::io, "{}: writer is closed", tmp_path_);
  if (n && std::fwrite(bytes, 1, n, f_.get()) != n)
    fail(ErrorKind::io, "writing {}: {}", tmp_path_, std::strerror(errno));
  pos_ += n;
}

void Writer::write_padding(uint64_t to_multiple_of) {
  static constexpr std::array<uint8_t, 64> kZeros{};
  uint64_t pad = align_up(pos_, to_multiple_of) - pos_;
  while (pad > 0) {
    const uint64_t n = std::min<uint64_t>(pad, kZeros.size());
    write_raw(kZeros.data(), n);
    pad -= n;
  }
}

void Writer::write_header() {
  if (header_written_) return;
  // general.alignment must say what the writer does: readers find the data by it.
  bool has_alignment_key = false;
  for (const auto& [key, v] : kv_) {
    if (key != "general.alignment") continue;
    has_alignment_key = true;
    const auto* x = std::get_if<uint64_t>(&v.v);
    if (v.type != ValueType::u32 || !x || *x != alignment_)
      fail(ErrorKind::invalid_arg, "{}: general.alignment is {} but the writer aligns to {}", path_,
           value_to_string(v), alignment_);
  }
  if (!has_alignment_key && alignment_ != kDefaultAlignment)
    kv_.emplace_back("general.alignment", Value::u32(alignment_));

  std::string buf;
  Encoder e(buf);
  e.put<uint32_t>(0x46554747);  // "GGUF"
  e.put<uint32_t>(kVersion);
  e.put<uint64_t>(tensors_.size());
  e.put<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    e.put_string(key);
    e.put_value(key, v);
  }
  for (const auto& t : tensors_) {
    e.put_string(t.name);
    e.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) e.put<uint64_t>(n);
    e.put<uint32_t>(static_cast<uint32_t>(t.type));
    e.put<uint64_t>(t.offset);
  }
  header_written_ = true;
  write_raw(buf.data(), buf.size());
  write_padding(alignment_);
  cur_ = 0;
  cur_written_ = 0;
}

void Writer::write_data(const void* bytes, uint64_t n) {
  if (finished_) fail(ErrorKind::invalid_arg, "{}: write_data after finish", path_);
  if (n > 0 && bytes == nullptr)
    fail(ErrorKind::invalid_arg, "{}: write_data(nullptr, {})", path_, n);
  if (!header_written_) write_header();
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (n > 0) {
    if (cur_ >= tensors_.size())
      fail(ErrorKind::invalid_arg, "{}: {} bytes written beyond the last declared tensor", path_,
           n);
    const Pending& t = tensors_[cur_];
    const uint64_t take = std::min(n, t.bytes - cur_written_);
    write_raw(p, take);
    p += take;
    n -= take;
    cur_written_ += take;
    if (cur_written_ == t.bytes) {
      write_padding(alignment_);
      ++cur_;
      cur_written_ = 0;
    }
  }
}

void Writer::finish() {
  if (finished_) return;
  if (!header_written_) write_header();
  if (cur_ < tensors_.size())
    fail(ErrorKind::invalid_arg,
         "{}: finish() with tensor '{}' incomplete ({} of {} bytes written)", path_,
         tensors_[cur_].name, cur_written_, tensors_[cur_].bytes);
  if (std::fflush(f_.get()) != 0 || ::fsync(::fileno(f_.get())) != 0)
    fail(ErrorKind::io, "writing {}: {}", tmp_path_, std::strerror(errno));
  std::FILE* f = f_.release();
  if (std::fclose(f) != 0) fail(ErrorKind::io, "closing {}: {}", tmp_path_, std::strerror(errno));
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail(ErrorKind::io, "renaming {} to {}: {}", tmp_path_, path_, std::strerror(errno));
  finished_ = true;
}

}  // namespace ferry::gguf
