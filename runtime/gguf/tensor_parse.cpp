// Parsing and placement of the tensor table.
#include <algorithm>
#include <limits>
#include <numeric>

#include "runtime/gguf/parse.hpp"

namespace ferry::gguf::detail {
namespace {

// ggml's GGML_MAX_NAME: names are stored in a 64-byte field including the terminator, and
// llama.cpp rejects longer ones.
constexpr uint64_t kMaxNameBytes = 63;
constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

std::string shape_string(const TensorInfo& t) {
  std::string s = "[";
  for (uint32_t i = 0; i < t.n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", t.ne[i]);
  return s + "]";
}

}  // namespace

TensorInfo read_tensor_info(Cursor& c, uint64_t index) {
  TensorInfo t;
  const uint64_t record_start = c.pos();
  t.name = c.read_string(fmt::format("name of tensor #{}", index));
  if (t.name.size() > kMaxNameBytes)
    fail(ErrorKind::format, "{}: tensor #{} at offset {} has a name of {} bytes (at most {})",
         c.path(), index, record_start, t.name.size(), kMaxNameBytes);
  const std::string what = fmt::format("tensor '{}'", t.name);

  t.n_dims = c.read<uint32_t>(what);
  if (t.n_dims > kMaxDims)
    fail(ErrorKind::format, "{}: tensor '{}' has n_dims = {} (at most {})", c.path(), t.name,
         t.n_dims, kMaxDims);
  uint64_t n_elements = 1;
  for (uint32_t i = 0; i < t.n_dims; ++i) {
    t.ne[i] = c.read<uint64_t>(what);
    // ggml itself accepts ne = 0, but an empty tensor is never a model weight and every consumer
    // (row counts, expert strides) would have to special-case it: rejected.
    if (t.ne[i] == 0)
      fail(ErrorKind::format, "{}: tensor '{}' has ne[{}] = 0 (empty tensors are not supported)",
           c.path(), t.name, i);
    if (t.ne[i] > kMaxInt64)
      fail(ErrorKind::format, "{}: tensor '{}' has ne[{}] = {}, beyond int64", c.path(), t.name, i,
           t.ne[i]);
    if (__builtin_mul_overflow(n_elements, t.ne[i], &n_elements) || n_elements > kMaxInt64)
      fail(ErrorKind::format, "{}: tensor '{}' shape {} has too many elements (overflows int64)",
           c.path(), t.name, shape_string(t));
  }

  const uint32_t type_id = c.read<uint32_t>(what);
  const auto info = type_info(type_id);
  if (!info)
    fail(ErrorKind::format, "{}: tensor '{}' has unknown ggml type id {}", c.path(), t.name,
         type_id);
  t.type = static_cast<GgmlType>(type_id);
  if (t.ne[0] % info->block_values != 0)
    fail(ErrorKind::format,
         "{}: tensor '{}' of type {} has ne[0] = {}, not a multiple of its block size {}", c.path(),
         t.name, info->name, t.ne[0], info->block_values);

  // Strides as ggml computes them: nb[0] = bytes of one block, nb[1] = bytes of a row,
  // nb[i] = nb[i-1] * ne[i-1].
  t.nb[0] = info->block_bytes;
  bool overflow =
      __builtin_mul_overflow(t.ne[0] / info->block_values, uint64_t{info->block_bytes}, &t.nb[1]);
  overflow = overflow || __builtin_mul_overflow(t.nb[1], t.ne[1], &t.nb[2]);
  overflow = overflow || __builtin_mul_overflow(t.nb[2], t.ne[2], &t.nb[3]);
  overflow = overflow || __builtin_mul_overflow(t.nb[3], t.ne[3], &t.n_bytes);
  if (overflow)
    fail(ErrorKind::format, "{}: tensor '{}' {} {} has a byte size that overflows", c.path(),
         t.name, info->name, shape_string(t));

  t.offset = c.read<uint64_t>(what);
  return t;
}

void place_tensors(std::vector<TensorInfo>& tensors, uint64_t data_offset, uint32_t alignment,
                   uint64_t file_size, const std::string& path) {
  for (auto& t : tensors) {
    if (t.offset % alignment != 0)
      fail(ErrorKind::format, "{}: tensor '{}' offset {} is not a multiple of the alignment {}",
           path, t.name, t.offset, alignment);
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_offset, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.n_bytes, &end))
      fail(ErrorKind::format, "{}: tensor '{}' offset {} + {} bytes overflows", path, t.name,
           t.offset, t.n_bytes);
    if (end > file_size)
      fail(ErrorKind::format, "{}: tensor '{}' data [{}, {}) lies past end of file (size {})", path,
           t.name, begin, end, file_size);
    t.file_offset = begin;
  }

  // Overlapping tensors would alias each other's bytes; writers never produce them.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].file_offset < tensors[b].file_offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& a = tensors[order[i - 1]];
    const TensorInfo& b = tensors[order[i]];
    if (a.file_offset + a.n_bytes > b.file_offset)
      fail(ErrorKind::format, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path, a.name,
           a.file_offset, a.file_offset + a.n_bytes, b.name, b.file_offset,
           b.file_offset + b.n_bytes);
  }
}

}  // namespace ferry::gguf::detail
