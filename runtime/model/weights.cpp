#include "runtime/model/weights.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry {
namespace {

std::string shape_str(const gguf::TensorInfo& t) {
  std::string s = "{";
  for (uint32_t i = 0; i < t.n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", t.ne[i]);
  return s + "}";
}

const gguf::TensorInfo& find(const gguf::File& f, std::string_view name, std::string_view expected) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) fail(ErrorKind::format, "tensor '{}' missing in {} (expected shape {})", name, f.path(), expected);
  return *t;
}

void check_compute_type(const gguf::File& f, const gguf::TensorInfo& t) {
  if (!type_info(t.type).compute)
    fail(ErrorKind::unsupported, "tensor '{}' in {} has type {}, which Ferry cannot compute with yet",
         t.name, f.path(), type_name(t.type));
}

}  // namespace

std::string layer_tensor(int32_t layer, std::string_view suffix) {
  return fmt::format("blk.{}.{}.weight", layer, suffix);
}

bool WeightLoader::has(std::string_view name) const { return f_.find_tensor(name) != nullptr; }

WeightView WeightLoader::matrix(std::string_view name, int64_t cols, int64_t rows) const {
  const std::string expected = fmt::format("{{{}, {}}}", cols, rows);
  const gguf::TensorInfo& t = find(f_, name, expected);
  if (t.n_dims != 2 || t.ne[0] != static_cast<uint64_t>(cols) || t.ne[1] != static_cast<uint64_t>(rows))
    fail(ErrorKind::format, "tensor '{}' in {} has shape {}, expected {}", name, f_.path(), shape_str(t), expected);
  check_compute_type(f_, t);
  return WeightView{f_.data(t), t.type, rows, cols};
}

WeightView WeightLoader::vector(std::string_view name, int64_t n) const {
  const std::string expected = fmt::format("{{{}}}", n);
  const gguf::TensorInfo& t = find(f_, name, expected);
  // llama.cpp's converter writes a one-row projection such as ffn_gate_inp_shexp (HF shape
  // [1, n_embd]) as {n, 1}; llama.cpp's loader treats missing dimensions as 1, so accept both.
  const bool trailing_ones = t.n_dims == 2 && t.ne[1] == 1;
  if ((t.n_dims != 1 && !trailing_ones) || t.ne[0] != static_cast<uint64_t>(n))
    fail(ErrorKind::format, "tensor '{}' in {} has shape {}, expected {}", name, f_.path(), shape_str(t), expected);
  if (t.type != GgmlType::F32)
    fail(ErrorKind::unsupported, "tensor '{}' in {} has type {}, expected f32", name, f_.path(), type_name(t.type));
  return WeightView{f_.data(t), t.type, 1, n};
}

ExpertTensor WeightLoader::experts(std::string_view name, int64_t n_in, int64_t n_out, int64_t n_expert) const {
  const std::string expected = fmt::format("{{{}, {}, {}}}", n_in, n_out, n_expert);
  const gguf::TensorInfo& t = find(f_, name, expected);
  if (t.n_dims != 3 || t.ne[0] != static_cast<uint64_t>(n_in) || t.ne[1] != static_cast<uint64_t>(n_out) ||
      t.ne[2] != static_cast<uint64_t>(n_expert))
    fail(ErrorKind::format, "tensor '{}' in {} has shape {}, expected {}", name, f_.path(), shape_str(t), expected);
  check_compute_type(f_, t);
  ExpertTensor e;
  e.base = f_.data(t);
  e.type = t.type;
  e.n_in = n_in;
  e.n_out = n_out;
  e.expert_stride_bytes = t.nb[2];
  return e;
}

}  // namespace ferry
