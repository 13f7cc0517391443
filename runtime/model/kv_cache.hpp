#pragma once
// KV caches of the attention layers of one session, in backend memory (layout: ops.hpp
// KvLayerView), plus the checks shared by every architecture with attention.
#include <cstdint>
#include <vector>

#include "runtime/backend/ops.hpp"
#include "runtime/model/config.hpp"

namespace ferry {

class KvCache {
 public:
  // One K and one V buffer per layer whose kind is attention; ErrorKind::invalid_arg for a type
  // outside kv_cache_type_supported(), a head size that is not a multiple of the type's block, or
  // an n_ctx < 1.
  KvCache(Ops& ops, const ModelConfig& cfg, int64_t n_ctx, GgmlType type_k, GgmlType type_v);
  // The view of layer il (must be an attention layer).
  const KvLayerView& layer(int32_t il) const;
  size_t bytes() const { return bytes_; }
  // Fills positions [n_have, n_to) of every layer with copies of positions [0, n_have), cyclically.
  // For benchmarks at a context depth: attention's cost does not depend on the values it reads, so
  // a depth made this way costs what an evaluated one does, without the quadratic prefill.
  void replicate(Ops& ops, int64_t n_have, int64_t n_to);

 private:
  std::vector<DeviceBuffer> buffers_;
  std::vector<KvLayerView> views_;  // indexed by layer; empty for non-attention layers
  size_t bytes_ = 0;
};

}  // namespace ferry
