#include "runtime/plan/plan_model.hpp"

#include <algorithm>

#include "offload/offload_executor.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/moe_setup.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/weights.hpp"

namespace ferry {
namespace {

bool is_expert_tensor(const std::string& name) { return name.find("_exps.") != std::string::npos; }

// "blk.N." → N, or -1.
int32_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return -1;
  try {
    return std::stoi(name.substr(4, dot - 4));
  } catch (...) {
    return -1;
  }
}

void add(std::vector<TypedBytes>& v, const gguf::TensorInfo& t) {
  for (TypedBytes& x : v)
    if (x.type == t.type) {
      x.bytes += t.n_bytes;
      x.elements += t.n_elements();
      return;
    }
  v.push_back({t.type, t.n_bytes, t.n_elements()});
}

}  // namespace

ModelSizes model_sizes(const gguf::File& f, const PlanRequest& r) {
  if (r.n_parallel < 1) fail(ErrorKind::invalid_arg, "-np {}: at least 1 sequence", r.n_parallel);
  if (r.n_batch < 1) fail(ErrorKind::invalid_arg, "-b {}: at least 1 token", r.n_batch);
  const ModelConfig c = read_config(f);
  ModelSizes s;
  s.name = f.path();
  s.arch = std::string(arch_name(c.arch));
  s.n_ctx_train = c.n_ctx_train;
  // The session's default context: the engine's one rule (default_context).
  s.n_ctx = r.n_ctx > 0 ? r.n_ctx : default_context(c);
  for (const gguf::TensorInfo& t : f.tensors()) {
    s.weights_bytes += t.n_bytes;
    s.n_params += static_cast<int64_t>(t.n_elements());
    if (is_expert_tensor(t.name)) s.expert_bytes += t.n_bytes;
  }
  s.dense_bytes = s.weights_bytes - s.expert_bytes;
  PlacementInput in = placement_input(f, c, s.n_ctx, r.type_k, r.type_v, r.n_batch, 0);
  // Sequences share the context's positions but each keeps its own recurrent state.
  in.state_bytes *= static_cast<uint64_t>(r.n_parallel);
  SimModel& m = s.sim;
  m.name = f.path();
  m.arch = s.arch;
  m.n_layer = c.n_layer;
  m.n_expert = c.n_expert;
  m.top_k = c.n_expert_used;
  m.layers.resize(static_cast<size_t>(c.n_layer));
  for (int32_t l = 0; l < c.n_layer; ++l) {
    SimLayer& L = m.layers[static_cast<size_t>(l)];
    L.expert.gate_type = f.tensor(layer_tensor(l, "ffn_gate_exps")).type;
    L.expert.up_type = f.tensor(layer_tensor(l, "ffn_up_exps")).type;
    L.expert.down_type = f.tensor(layer_tensor(l, "ffn_down_exps")).type;
    L.expert.n_embd = c.n_embd;
    L.expert.n_ff = c.n_ff_exp;
    L.attention = c.layer_kind[static_cast<size_t>(l)] == LayerKind::attention;
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int32_t l = layer_of(t.name);
    if (l >= c.n_layer || is_expert_tensor(t.name)) continue;  // MTP blocks are not run
    if (l >= 0) add(m.layers[static_cast<size_t>(l)].dense, t);
    else if (t.name != "token_embd.weight") add(m.head, t);  // the embedding: one row per token
  }
  // A tied lm_head multiplies by the embedding matrix.
  if (!f.find_tensor("output.weight")) add(m.head, f.tensor("token_embd.weight"));
  m.kv_bytes_per_position = in.kv_bytes / static_cast<uint64_t>(s.n_ctx);
  const int64_t max_batch = std::min<int64_t>(r.n_batch, s.n_ctx);
  in.step_bytes = device_step_bytes(max_batch, m.layers[0].expert, c.n_expert_used, c.n_expert);
  m.placement = in;
  s.kv_bytes = in.kv_bytes;
  s.state_bytes = in.state_bytes;
  s.workspace_bytes = in.workspace_bytes;
  s.step_bytes = in.step_bytes;
  return s;
}

}  // namespace ferry
