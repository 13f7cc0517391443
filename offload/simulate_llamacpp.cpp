#include "offload/simulate_llamacpp.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "offload/simulate_cache.hpp"
#include "offload/simulate_routing.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

double weights_us(const SimRates& r, const std::vector<TypedBytes>& w, double scale = 1.0) {
  double us = 0;
  for (const TypedBytes& t : w) us += r.kernel_us(t.type, t.bytes, /*llama=*/true) * scale;
  return us;
}

double elements(const std::vector<TypedBytes>& w) {
  double n = 0;
  for (const TypedBytes& t : w) n += static_cast<double>(t.elements);
  return n;
}

std::vector<TypedBytes> expert_weights(const ExpertShape& s) {
  const auto el = static_cast<uint64_t>(s.n_embd) * static_cast<uint64_t>(s.n_ff);
  return {{s.gate_type, s.gate_bytes(), el}, {s.up_type, s.up_bytes(), el},
          {s.down_type, s.down_bytes(), el}};
}

uint64_t layer_experts_bytes(const SimModel& m, int32_t l) {
  return m.layers[static_cast<size_t>(l)].expert.expert_bytes() * static_cast<uint64_t>(m.n_expert);
}

// Per layer, how many of the decoded tokens' routed experts the static cache holds (`cached`,
// one row per layer; empty: no cache), over `n_tokens` tokens of `router`.
std::vector<uint64_t> cache_hits(const SimModel& m, const std::vector<std::vector<uint8_t>>& cached,
                                 int64_t n_tokens, SimRouter& router) {
  std::vector<uint64_t> hits(static_cast<size_t>(m.n_layer), 0);
  if (cached.empty()) return hits;
  std::vector<int32_t> ids(static_cast<size_t>(m.top_k));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int32_t l = 0; l < m.n_layer; ++l) {
      router.next(l, ids.data());
      for (int32_t e : ids) hits[static_cast<size_t>(l)] += cached[static_cast<size_t>(l)][static_cast<size_t>(e)];
    }
  return hits;
}

uint64_t kv_at(const SimModel& m, int64_t n_ctx) {
  return m.kv_bytes_per_position * static_cast<uint64_t>(n_ctx);
}

}  // namespace

uint64_t llamacpp_device_bytes(const SimModel& m, const std::vector<double>& cpu_fraction,
                               int64_t n_ctx) {
  const PlacementInput& in = m.placement;
  double experts = 0;
  for (int32_t l = 0; l < m.n_layer; ++l)
    experts += double(layer_experts_bytes(m, l)) * (1.0 - cpu_fraction[static_cast<size_t>(l)]);
  return in.dense_bytes + kv_at(m, n_ctx) + in.state_bytes + in.workspace_bytes +
         static_cast<uint64_t>(experts);
}

LlamaPlacement llamacpp_ncmoe(const SimModel& m, const SimRates& r, int32_t n_cpu_moe,
                              uint64_t free_bytes) {
  LlamaPlacement p;
  p.n_ctx = m.placement.n_ctx;
  p.n_cpu_moe = std::clamp(n_cpu_moe, 0, m.n_layer);
  p.cpu_fraction.assign(static_cast<size_t>(m.n_layer), 0.0);
  for (int32_t l = 0; l < p.n_cpu_moe; ++l) p.cpu_fraction[static_cast<size_t>(l)] = 1.0;
  p.device_bytes = llamacpp_device_bytes(m, p.cpu_fraction, p.n_ctx);
  p.fits = p.device_bytes + r.fit_margin_bytes <= free_bytes;
  p.note = fmt::format("-ncmoe {}", p.n_cpu_moe);
  return p;
}

LlamaPlacement llamacpp_best_ncmoe(const SimModel& m, const SimRates& r, uint64_t free_bytes) {
  for (int32_t n = 0; n <= m.n_layer; ++n) {
    LlamaPlacement p = llamacpp_ncmoe(m, r, n, free_bytes);
    if (p.fits) return p;
  }
  LlamaPlacement p = llamacpp_ncmoe(m, r, m.n_layer, free_bytes);
  p.note = fmt::format("does not fit with every expert in host memory (-ncmoe {})", m.n_layer);
  return p;
}

LlamaPlacement llamacpp_fit(const SimModel& m, const SimRates& r, uint64_t free_bytes,
                            bool ctx_set_by_user, int64_t n_ctx) {
  LlamaPlacement p;
  p.n_ctx = n_ctx > 0 ? n_ctx : m.placement.n_ctx;
  const auto L = static_cast<size_t>(m.n_layer);
  const int64_t target = static_cast<int64_t>(free_bytes) - static_cast<int64_t>(r.fit_margin_bytes);
  std::vector<double> all_gpu(L, 0.0), all_cpu(L, 1.0);
  const auto used = [&](const std::vector<double>& f, int64_t ctx) {
    return static_cast<int64_t>(llamacpp_device_bytes(m, f, ctx));
  };
  if (used(all_gpu, p.n_ctx) <= target) {
    p.cpu_fraction = all_gpu;
  } else {
    // Step 2: a context the user did not set shrinks (linearly in its KV bytes) to what fits,
    // not below the minimum.
    if (!ctx_set_by_user && p.n_ctx > r.fit_min_ctx && m.kv_bytes_per_position > 0) {
      const int64_t over = used(all_gpu, p.n_ctx) - target;
      const int64_t shrink = (over + int64_t(m.kv_bytes_per_position) - 1) / int64_t(m.kv_bytes_per_position);
      p.n_ctx = std::max(r.fit_min_ctx, (p.n_ctx - shrink) / 256 * 256);
    }
    // Steps 3-4: full layers front to back while they fit; the next one split by tensor (up,
    // then up + gate on the GPU); the rest keep their experts in host memory.
    p.cpu_fraction = all_cpu;
    for (size_t l = 0; l < L; ++l) {
      std::vector<double> t = p.cpu_fraction;
      t[l] = 0.0;
      if (used(t, p.n_ctx) <= target) {
        p.cpu_fraction = t;
        continue;
      }
      const ExpertShape& s = m.layers[l].expert;
      const double b = double(s.expert_bytes());
      for (double gpu_share : {double(s.up_bytes() + s.gate_bytes()) / b, double(s.up_bytes()) / b}) {
        t[l] = 1.0 - gpu_share;
        if (used(t, p.n_ctx) <= target) {
          p.cpu_fraction = t;
          break;
        }
      }
      break;
    }
  }
  p.device_bytes = used(p.cpu_fraction, p.n_ctx);
  p.fits = static_cast<int64_t>(p.device_bytes) <= target;
  int32_t host_layers = 0;
  for (double f : p.cpu_fraction) host_layers += f > 0 ? 1 : 0;
  p.note = p.fits ? fmt::format("fit: {} of {} layers with experts in host memory, context {}",
                                host_layers, m.n_layer, p.n_ctx)
                  : "fit: the dense part does not fit";
  return p;
}

SimResult simulate_llamacpp(const SimModel& m, const SimRates& r, const LlamaPlacement& p,
                            const SimOptions& o, SimStrategy strategy) {
  SimResult s;
  s.strategy = strategy;
  s.fits = p.fits;
  s.note = p.note;
  s.n_cpu_moe = p.n_cpu_moe;
  double gpu_share = 0;
  for (double f : p.cpu_fraction) gpu_share += 1.0 - f;
  s.experts_on_gpu_fraction = gpu_share / double(m.n_layer);
  const double k = double(m.top_k);
  // One routing stream, as one model routes: the static cache's profile first (its trace tool's
  // run, model revision 11), then the prompt, then the decoded tokens.
  SimRouter router(o.routing, m.n_layer, m.n_expert, m.top_k);
  const std::vector<std::vector<uint8_t>> cached =
      p.cache_slots > 0 ? static_cache_sets(router, m.n_layer, m.n_expert, m.top_k, p.cache_slots,
                                            r.llama_cache_profile_tokens)
                        : std::vector<std::vector<uint8_t>>{};
  // Prefill: micro-batches of up to `ubatch` tokens, computed on the GPU at llama.cpp's prefill rate
  // after the host-resident expert tensors' experts that the micro-batch routes to were copied over
  // from pageable memory (batches of at least the offload minimum; llama.cpp copies only the used
  // experts since its PR 15346; a cached expert is on the GPU already); smaller batches compute
  // those experts on the CPU.
  double active = elements(m.head);
  for (const SimLayer& L : m.layers)
    active += elements(L.dense) + k * elements(expert_weights(L.expert));
  double prefill_us = 0;
  std::vector<int32_t> ids(static_cast<size_t>(m.top_k));
  std::vector<uint8_t> routed(static_cast<size_t>(m.n_expert));
  for (int64_t done = 0; done < o.n_prompt; done += r.llama_ubatch) {
    const int64_t u = std::min<int64_t>(r.llama_ubatch, o.n_prompt - done);
    prefill_us += 2.0 * active * double(u) / (r.llama_prefill_gflops * 1e3);
    for (int32_t l = 0; l < m.n_layer; ++l) {
      // Every layer's routing is drawn, as the model routes every layer.
      std::fill(routed.begin(), routed.end(), uint8_t{0});
      for (int64_t t = 0; t < u; ++t) {
        router.next(l, ids.data());
        for (int32_t e : ids)
          routed[static_cast<size_t>(e)] = static_cast<uint8_t>(
              cached.empty() || !cached[static_cast<size_t>(l)][static_cast<size_t>(e)]);
      }
      const double f = p.cpu_fraction[static_cast<size_t>(l)];
      if (f <= 0) continue;
      const auto n_routed = static_cast<double>(std::count(routed.begin(), routed.end(), uint8_t{1}));
      const double host_bytes =
          f * n_routed * double(m.layers[static_cast<size_t>(l)].expert.expert_bytes());
      if (u >= r.llama_offload_min_batch) {
        s.h2d_demand_bytes += static_cast<uint64_t>(host_bytes);
        prefill_us += r.copy_latency_us + host_bytes / (r.llama_upload_gbps * 1e3);
      } else {
        prefill_us += double(u) * k * f * double(m.layers[static_cast<size_t>(l)].expert.expert_bytes()) /
                      (r.llama_cpu_gbps * 1e3);
      }
    }
  }
  s.prefill_us = prefill_us;
  s.pp_tps = prefill_us > 0 ? double(o.n_prompt) / (prefill_us / 1e6) : 0.0;
  // A placement that does not fit the memory estimate is still timed: a user who ran it (a
  // published -ncmoe figure) had the memory, and the time does not depend on it.
  // Decode: per layer the GPU's dense and expert work (graph nodes), then the host's experts
  // behind a graph split; one synchronisation for the logits. Attention reads the KV of the
  // positions so far (the prompt, then half the decoded tokens on average).
  const double depth = double(o.n_prompt) + double(o.n_decode) / 2.0;
  int32_t attn_layers = 0;
  for (const SimLayer& L : m.layers) attn_layers += L.attention ? 1 : 0;
  const double kv_layer = attn_layers ? double(m.kv_bytes_per_position) / attn_layers : 0.0;
  // The cache's hit rate per layer, over the decoded tokens (at least one).
  const int64_t n_hit_tokens = std::max<int64_t>(o.n_decode, 1);
  const std::vector<uint64_t> hits = cache_hits(m, cached, n_hit_tokens, router);
  std::vector<double> h(hits.size());
  for (size_t l = 0; l < h.size(); ++l) {
    h[l] = double(hits[l]) / (double(n_hit_tokens) * k);
    if (cached.empty() || p.cpu_fraction[l] <= 0) continue;
    s.decode_hits += hits[l];
    s.decode_uses += static_cast<uint64_t>(n_hit_tokens * m.top_k);
  }
  if (p.cache_slots > 0)
    s.note += fmt::format(", a static VRAM cache of {} experts per layer (hit rate {:.1f}% of its layers' uses)",
                          p.cache_slots, 100 * s.decode_hit_rate());
  // llama.cpp's own kernels per layer (model revision 9), each at the graph's per-node cost.
  const double nodes_per_layer = r.llama_nodes(m.arch);
  SimTokenTime t;
  for (int32_t l = 0; l < m.n_layer; ++l) {
    const SimLayer& L = m.layers[static_cast<size_t>(l)];
    // Host-resident experts the cache holds run on the GPU.
    const double host = p.cpu_fraction[static_cast<size_t>(l)];
    const double f = host * (1.0 - h[static_cast<size_t>(l)]);
    t.gpu_dense_us += weights_us(r, L.dense) + (L.attention ? kv_layer * depth / (r.mem_gbps * 1e3) : 0);
    t.gpu_expert_us += weights_us(r, expert_weights(L.expert), k * (1.0 - f));
    // A layer with host experts runs its mul_mat_ids and the GLU between them on the CPU, in a
    // split of its own (model revision 10): those nodes leave the GPU's graph and cost the CPU's
    // per-node time; the split boundaries cost their copies, waits and the next graph launch.
    // With the static cache (model revision 11) the layer's graph keeps its CPU split (the graph
    // does not change with the token's routing) and its GPU nodes too, running the cached experts,
    // plus the merge of the two sums.
    const bool with_cache = !cached.empty() && host > 0;
    const bool split = with_cache || f > 0;
    const double cpu_nodes = split ? std::min(r.llama_cpu_nodes, nodes_per_layer) : 0.0;
    const double gpu_nodes = with_cache ? nodes_per_layer + r.llama_cache_merge_nodes : nodes_per_layer - cpu_nodes;
    t.launch_us += gpu_nodes * r.llama_graph_node_us;
    if (split) {
      t.cpu_expert_us += k * f * double(L.expert.expert_bytes()) / (r.llama_cpu_gbps * 1e3) +
                         cpu_nodes * r.llama_cpu_node_us;
      t.gpu_wait_us[static_cast<size_t>(WaitCause::sync)] += r.llama_split_us();
    }
  }
  t.gpu_dense_us += weights_us(r, m.head);
  t.gpu_wait_us[static_cast<size_t>(WaitCause::sync)] += r.sync_us;
  t.gpu_wait_us[static_cast<size_t>(WaitCause::cpu_expert)] = t.cpu_expert_us;
  t.total_us = t.gpu_dense_us + t.gpu_expert_us + t.launch_us + t.cpu_expert_us +
               t.gpu_wait_us[static_cast<size_t>(WaitCause::sync)];
  s.token = t;
  s.tg_tps = 1e6 / t.total_us;
  s.decode_tokens = static_cast<uint64_t>(o.n_decode);
  return s;
}

}  // namespace ferry
