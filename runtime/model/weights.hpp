#pragma once
// Typed, shape-checked views of GGUF tensors. Views point into the mmapped file: nothing is
// copied, so a 17 GB model "loads" in the time it takes to validate its tensor table, and pages
// come in as the forward first touches them.
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/moe/step.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry::gguf { class File; }

namespace ferry {

// "blk.{layer}.{suffix}.weight"
std::string layer_tensor(int32_t layer, std::string_view suffix);

class WeightLoader {
 public:
  explicit WeightLoader(const gguf::File& f) : f_(f) {}

  bool has(std::string_view name) const;
  // A 2-D weight with GGUF ne = {cols, rows} (a projection from cols to rows). Errors name the
  // tensor, the file, and the expected vs actual shape; types without CPU kernels are rejected.
  WeightView matrix(std::string_view name, int64_t cols, int64_t rows) const;
  // A 1-D F32 vector of n values (norm weights), as a WeightView with rows = 1.
  WeightView vector(std::string_view name, int64_t n) const;
  // A 3-D expert tensor {n_in, n_out, n_expert}.
  ExpertTensor experts(std::string_view name, int64_t n_in, int64_t n_out, int64_t n_expert) const;

 private:
  const gguf::File& f_;
};

}  // namespace ferry
