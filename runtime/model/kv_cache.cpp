#include "runtime/model/kv_cache.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include "runtime/core/error.hpp"

namespace ferry {

KvCache::KvCache(Ops& ops, const ModelConfig& cfg, int64_t n_ctx, GgmlType type_k, GgmlType type_v) {
  for (GgmlType t : {type_k, type_v})
    if (!kv_cache_type_supported(t))
      fail(ErrorKind::invalid_arg, "KV cache type {} is not supported (use one of {})", type_name(t),
           kv_cache_type_names());
  for (GgmlType t : {type_k, type_v})
    if (!ops.kv_type_supported(t))
      fail(ErrorKind::unsupported, "KV cache type {} is not supported on the {} backend", type_name(t), ops.name());
  if (n_ctx < 1 || n_ctx > INT32_MAX)
    fail(ErrorKind::invalid_arg, "context size {} must be in [1, {}]", n_ctx, INT32_MAX);
  for (auto [t, dim, what] : {std::tuple{type_k, cfg.head_dim_k, "K"}, std::tuple{type_v, cfg.head_dim_v, "V"}})
    if (dim % static_cast<int64_t>(type_info(t).block_values) != 0)
      fail(ErrorKind::invalid_arg, "KV cache type {} for {}: the head size {} is not a multiple of its block of {}",
           type_name(t), what, dim, type_info(t).block_values);
  // Bytes of one position of one layer: n_head_kv head rows of whole blocks.
  const size_t kb = cfg.n_head_kv * row_bytes(type_k, static_cast<uint64_t>(cfg.head_dim_k));
  const size_t vb = cfg.n_head_kv * row_bytes(type_v, static_cast<uint64_t>(cfg.head_dim_v));
  views_.resize(cfg.layer_kind.size());
  for (size_t il = 0; il < cfg.layer_kind.size(); ++il) {
    if (cfg.layer_kind[il] != LayerKind::attention) continue;
    const size_t k_bytes = static_cast<size_t>(n_ctx) * kb;
    const size_t v_bytes = static_cast<size_t>(n_ctx) * vb;
    DeviceBuffer k = ops.alloc(k_bytes), v = ops.alloc(v_bytes);
    KvLayerView& view = views_[il];
    view.k = k.data();
    view.v = v.data();
    view.type_k = type_k;
    view.type_v = type_v;
    view.n_ctx = n_ctx;
    view.n_head_kv = cfg.n_head_kv;
    view.head_dim_k = cfg.head_dim_k;
    view.head_dim_v = cfg.head_dim_v;
    bytes_ += k_bytes + v_bytes;
    buffers_.push_back(std::move(k));
    buffers_.push_back(std::move(v));
  }
}

void KvCache::replicate(Ops& ops, int64_t n_have, int64_t n_to) {
  if (n_have < 1 || n_to < n_have)
    fail(ErrorKind::invalid_arg, "KV replicate [0, {}) up to {}: needs 1 <= n_have <= n_to", n_have,
         n_to);
  std::vector<uint8_t> staging;
  for (const KvLayerView& view : views_) {
    if (!view.k) continue;
    if (n_to > view.n_ctx)
      fail(ErrorKind::context, "KV replicate up to {} positions: the cache holds {}", n_to,
           view.n_ctx);
    for (auto [base, row] :
         {std::pair{static_cast<uint8_t*>(view.k), view.n_head_kv * view.k_head_bytes()},
          std::pair{static_cast<uint8_t*>(view.v), view.n_head_kv * view.v_head_bytes()}}) {
      staging.resize(static_cast<size_t>(n_have) * row);
      ops.to_host(staging.data(), base, staging.size());
      for (int64_t pos = n_have; pos < n_to; pos += n_have) {
        const int64_t n = std::min(n_have, n_to - pos);
        ops.to_device(base + static_cast<size_t>(pos) * row, staging.data(),
                      static_cast<size_t>(n) * row);
      }
    }
  }
  ops.sync();
}

const KvLayerView& KvCache::layer(int32_t il) const {
  if (il < 0 || static_cast<size_t>(il) >= views_.size() || !views_[static_cast<size_t>(il)].k)
    fail(ErrorKind::internal, "layer {} has no KV cache", il);
  return views_[static_cast<size_t>(il)];
}

}  // namespace ferry
