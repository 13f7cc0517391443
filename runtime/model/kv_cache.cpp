#include "runtime/model/kv_cache.hpp"

#include "runtime/core/error.hpp"

namespace ferry {

KvCache::KvCache(Ops& ops, const ModelConfig& cfg, int64_t n_ctx, GgmlType type_k, GgmlType type_v) {
  for (GgmlType t : {type_k, type_v})
    if (t != GgmlType::F16 && t != GgmlType::F32)
      fail(ErrorKind::invalid_arg, "KV cache type {} is not supported (use f16 or f32)", type_name(t));
  if (n_ctx < 1 || n_ctx > INT32_MAX)
    fail(ErrorKind::invalid_arg, "context size {} must be in [1, {}]", n_ctx, INT32_MAX);
  const size_t kb = type_k == GgmlType::F16 ? 2 : 4, vb = type_v == GgmlType::F16 ? 2 : 4;
  views_.resize(cfg.layer_kind.size());
  for (size_t il = 0; il < cfg.layer_kind.size(); ++il) {
    if (cfg.layer_kind[il] != LayerKind::attention) continue;
    const size_t k_bytes = static_cast<size_t>(n_ctx) * cfg.n_head_kv * cfg.head_dim_k * kb;
    const size_t v_bytes = static_cast<size_t>(n_ctx) * cfg.n_head_kv * cfg.head_dim_v * vb;
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

const KvLayerView& KvCache::layer(int32_t il) const {
  if (il < 0 || static_cast<size_t>(il) >= views_.size() || !views_[static_cast<size_t>(il)].k)
    fail(ErrorKind::internal, "layer {} has no KV cache", il);
  return views_[static_cast<size_t>(il)];
}

}  // namespace ferry
