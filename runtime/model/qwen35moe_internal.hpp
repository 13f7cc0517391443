#pragma once
// Internal to the hybrid models (qwen35moe.cpp, qwen35moe_deltanet.cpp, qwen3next.cpp): weights
// of one block, the per-session state, and the DeltaNet block forward.
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/backend/gdn_ops.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"

namespace ferry::gguf { class File; }

namespace ferry::hybrid {

// Dimensions of the DeltaNet blocks, derived once from the config.
struct GdnDims {
  int32_t n_k_heads = 0;   // ssm.group_count
  int32_t n_v_heads = 0;   // ssm.time_step_rank
  int32_t head_dim = 0;    // ssm.state_size (= ssm.inner_size / n_v_heads)
  int32_t conv_kernel = 0; // ssm.conv_kernel
  int64_t key_dim() const { return int64_t{n_k_heads} * head_dim; }
  int64_t value_dim() const { return int64_t{n_v_heads} * head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // rows of attn_qkv: [q | k | v]
};

// How the β/α projections are stored.
enum class GateLayout {
  split,    // qwen35moe: ssm_beta {n_embd, H_v} and ssm_alpha {n_embd, H_v}
  grouped,  // qwen3next: ssm_ba {n_embd, 2·H_v}, per key head g: [β (H_v/H_k) | α (H_v/H_k)]
};

struct DeltaNetWeights {
  WeightView qkv;       // (conv_dim, n_embd) attn_qkv
  WeightView z;         // (value_dim, n_embd) attn_gate
  WeightView beta;      // (H_v, n_embd) ssm_beta            (split)
  WeightView alpha;     // (H_v, n_embd) ssm_alpha           (split)
  WeightView ba;        // (2·H_v, n_embd) ssm_ba            (grouped)
  WeightView out;       // (n_embd, value_dim) ssm_out
  const float* conv1d;  // (conv_dim, K) F32
  const float* dt_bias; // (H_v) ssm_dt.bias
  const float* ssm_a;   // (H_v) −exp(A_log)
  const float* norm;    // (head_dim) ssm_norm
};

struct AttentionWeights {
  WeightView wq;      // (n_head·2·head_dim, n_embd): per head [q | gate]
  WeightView wk;      // (n_head_kv·head_dim, n_embd)
  WeightView wv;      // (n_head_kv·head_dim, n_embd)
  WeightView wo;      // (n_embd, n_head·head_dim)
  const float* q_norm;  // (head_dim)
  const float* k_norm;  // (head_dim)
};

struct Layer {
  LayerKind kind = LayerKind::attention;
  const float* attn_norm = nullptr;  // (n_embd)
  const float* post_norm = nullptr;  // (n_embd) post_attention_norm
  AttentionWeights attn{};
  DeltaNetWeights gdn{};
  WeightView gate_inp;        // (n_expert, n_embd) router
  WeightView gate_inp_shexp;  // (1, n_embd) shared-expert gate
  WeightView gate_shexp;      // (n_ff_shexp, n_embd)
  WeightView up_shexp;        // (n_ff_shexp, n_embd)
  WeightView down_shexp;      // (n_embd, n_ff_shexp)
};

// Per-session state: KV caches of the attention blocks, the recurrent state of the DeltaNet
// blocks, and the workspace of one step of up to n_batch (B) tokens, all in backend memory.
class State final : public ModelState {
 public:
  State(Ops& ops, const ModelConfig& c, const GdnDims& d, const StateOptions& o);
  size_t bytes() const override { return kv.bytes() + recurrent_bytes + ws_bytes; }
  // Starts over: the recurrent state goes back to zeros (the KV rows are simply not read).
  void reset() override;
  // A recurrent state cannot drop a suffix: only n == n_past (nothing to do) and n == 0 (reset)
  // succeed; otherwise false and the caller re-evaluates.
  bool truncate(int64_t n) override;
  // Checkpoints of the DeltaNet conv and ssm states (hybrid_checkpoint.cpp): the attention
  // blocks go back by truncation, the recurrent ones by copying a saved state back.
  bool needs_checkpoints() const override { return recurrent_bytes > 0; }
  StateCheckpoint save_checkpoint() const override;
  void restore_checkpoint(const StateCheckpoint& c) override;
  // Copies KV rows of the attention blocks; the DeltaNet state stays that of n_past positions.
  void extend_by_copy(int64_t n) override {
    kv.replicate(ops, n_past_, n);
    n_past_ = n;
  }

  static constexpr int64_t kLogitsRows = 16;  // logits produced in slices (see qwen3moe.cpp)

  Ops& ops;
  KvCache kv;
  std::vector<DeviceBuffer> conv_state;  // per layer: (K−1, conv_dim), empty for attention blocks
  std::vector<DeviceBuffer> ssm_state;   // per layer: (H_v, S, S) key-major, empty for attention
  size_t recurrent_bytes = 0;
  size_t ws_bytes = 0;

  DeviceBuffer tokens, pos;        // (B) int32
  DeviceBuffer x, h;               // (B, n_embd) residual stream, normed input of a sub-block
  DeviceBuffer mix_out;            // (B, n_embd) output of the token mixer (attention/DeltaNet)
  // attention blocks
  DeviceBuffer qg;                 // (B, n_head, 2·head_dim) per head [q | gate]
  DeviceBuffer k, v;               // (B, n_head_kv, head_dim)
  DeviceBuffer attn;               // (B, n_head, head_dim)
  // DeltaNet blocks
  DeviceBuffer qkv;                // (B, conv_dim) projection before the conv
  DeviceBuffer conv;               // (B, conv_dim) after conv + SiLU: [q (H_k·S) | k (H_k·S) | v]
  DeviceBuffer z;                  // (B, value_dim) output gate
  DeviceBuffer ba;                 // (B, 2·H_v) raw β | α projections (layout per GateLayout)
  DeviceBuffer beta, g;            // (B, H_v)
  DeviceBuffer core;               // (B, H_v, S) delta-rule output, normed in place
  // MoE
  DeviceBuffer router;             // (B, n_expert)
  DeviceBuffer expert_ids;         // (B, top_k) int32
  DeviceBuffer expert_w;           // (B, top_k)
  DeviceBuffer moe_out;            // (B, n_embd)
  DeviceBuffer sh_gate, sh_up;     // (B, n_ff_shexp)
  DeviceBuffer sh_out;             // (B, n_embd)
  DeviceBuffer sh_logit;           // (B)
  int64_t logits_rows = 0;
  DeviceBuffer logits;             // (logits_rows, n_vocab)
};

using Debug = std::function<void(std::string_view, int32_t, const float*, int64_t, int64_t)>;

// Everything the DeltaNet block forward needs besides the layer's weights.
struct GdnContext {
  Ops& ops;
  GdnOps& gdn;
  const ModelConfig& cfg;
  GdnDims dims;
  GateLayout gates;
  cpu::GdnKeyHeadMap key_map;
  const Debug& debug;
};

// The DeltaNet token mixer of block il for nb tokens: reads st.h, writes st.mix_out, advances the
// layer's conv and matrix states.
void deltanet_forward(const GdnContext& ctx, const Layer& L, int32_t il, State& st, int64_t nb);

// qwen3next's grouped β/α: st.ba (nb, 2·H_v) → st.beta, st.g. (qwen3next.cpp)
void gates_grouped(const GdnContext& ctx, const Layer& L, State& st, int64_t nb);

// Checks the DeltaNet hyperparameters the kernels rely on and derives the dims (names the file).
GdnDims gdn_dims(const ModelConfig& c);

// The hybrid model with the arch-specific choices.
std::unique_ptr<Model> make_hybrid(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                   const MoeExecutorFactory& moe, const LoadProgress& progress,
                                   GateLayout gates, cpu::GdnKeyHeadMap key_map);

}  // namespace ferry::hybrid
