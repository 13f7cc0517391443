// File::describe: a GGUF's metadata and tensor table without its data (see gguf.hpp). The
// strides, sizes and offsets follow the reader's rules (tensor_parse.cpp) and the writer's
// placement (each tensor at the next multiple of the alignment), so a described model and the
// file written from the same declarations report the same bytes.
#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/gguf/parse.hpp"

namespace ferry::gguf {

File File::describe(std::string label, std::vector<std::pair<std::string, Value>> metadata,
                    const std::vector<TensorDecl>& tensors, uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail(ErrorKind::invalid_arg, "{}: alignment {} is not a power of two", label, alignment);
  File f;
  f.path_ = std::move(label);
  f.version_ = 3;
  f.alignment_ = alignment;
  for (auto& [k, v] : metadata) {
    if (!f.kv_index_.emplace(k, f.kv_.size()).second)
      fail(ErrorKind::format, "{}: duplicate key '{}'", f.path_, k);
    f.kv_.emplace_back(std::move(k), std::move(v));
  }
  uint64_t offset = 0;
  for (const TensorDecl& d : tensors) {
    if (d.ne.empty() || d.ne.size() > 4)
      fail(ErrorKind::format, "{}: tensor '{}' has {} dims (1..4)", f.path_, d.name, d.ne.size());
    TensorInfo t;
    t.name = d.name;
    t.type = d.type;
    t.n_dims = static_cast<uint32_t>(d.ne.size());
    for (size_t i = 0; i < d.ne.size(); ++i) {
      if (d.ne[i] == 0) fail(ErrorKind::format, "{}: tensor '{}' has ne[{}] = 0", f.path_, d.name, i);
      t.ne[i] = d.ne[i];
    }
    const TypeInfo& info = type_info(d.type);
    t.nb[0] = info.block_bytes;
    t.nb[1] = row_bytes(d.type, t.ne[0]);  // format error when ne[0] is not a block multiple
    bool overflow = __builtin_mul_overflow(t.nb[1], t.ne[1], &t.nb[2]);
    overflow = overflow || __builtin_mul_overflow(t.nb[2], t.ne[2], &t.nb[3]);
    overflow = overflow || __builtin_mul_overflow(t.nb[3], t.ne[3], &t.n_bytes);
    if (overflow) fail(ErrorKind::format, "{}: tensor '{}' byte size overflows", f.path_, d.name);
    t.offset = offset;
    offset = (offset + t.n_bytes + alignment - 1) / alignment * alignment;
    if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second)
      fail(ErrorKind::format, "{}: duplicate tensor name '{}'", f.path_, d.name);
    f.tensors_.push_back(std::move(t));
  }
  f.data_offset_ = 0;
  f.size_ = offset;
  detail::place_tensors(f.tensors_, f.data_offset_, alignment, f.size_, f.path_);
  return f;
}

}  // namespace ferry::gguf
