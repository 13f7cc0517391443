#pragma once
// A loaded model: weights (views into the GGUF mapping) plus a forward written against Ops.
// Per-conversation state (KV cache, recurrent state, workspace) lives in a ModelState made by the
// model, so several sessions can share one Model. Architectures: one file each (qwen3moe.cpp, ...);
// load_model() dispatches on the config's architecture.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/moe/step.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/model/config.hpp"

namespace ferry::gguf { class File; }

namespace ferry {

struct StateOptions {
  int64_t n_ctx = 4096;               // positions the caches hold
  GgmlType type_k = GgmlType::F16;    // KV cache types (kv_cache_type_supported())
  GgmlType type_v = GgmlType::F16;
  int32_t n_batch = 512;              // tokens per forward step (longer inputs are split)
};

// A host-memory copy of what truncate() cannot bring back: the recurrent (DeltaNet conv + ssm)
// state after n_past positions. Restoring it with the attention caches' rows [0, n_past) still
// those of the same tokens puts the state back at n_past exactly (the copy is byte for byte).
// Attention-only states have nothing recurrent: their checkpoints hold no buffers.
struct StateCheckpoint {
  int64_t n_past = 0;
  std::vector<std::vector<uint8_t>> buffers;  // per recurrent buffer, in the state's own order
  size_t bytes() const {
    size_t n = 0;
    for (const auto& b : buffers) n += b.size();
    return n;
  }
};

class ModelState {
 public:
  virtual ~ModelState() = default;
  int64_t n_past() const { return n_past_; }  // positions already evaluated
  int64_t n_ctx() const { return n_ctx_; }
  int32_t n_batch() const { return n_batch_; }
  // Forget all positions (caches need not be cleared: rows past n_past are never read).
  virtual void reset() { n_past_ = 0; }
  // Keep only the first n positions. Attention caches can always do this; a recurrent state
  // cannot go back and reports false (the caller then resets and re-evaluates).
  virtual bool truncate(int64_t n);
  virtual size_t bytes() const = 0;  // backend memory held (caches + workspace)
  // True when truncate() cannot go back (a recurrent state): going back to an earlier prefix then
  // needs a checkpoint saved when the state was there.
  virtual bool needs_checkpoints() const { return false; }
  // The state at n_past as a host copy (no buffers when needs_checkpoints() is false).
  virtual StateCheckpoint save_checkpoint() const;
  // Back to c.n_past positions (<= n_past; the caller guarantees the attention rows before it are
  // those of the tokens the checkpoint saw). ErrorKind::invalid_arg when c is later than n_past or
  // its buffers do not match this state's.
  virtual void restore_checkpoint(const StateCheckpoint& c);
  // Extends the evaluated positions to n by copying the KV rows already written (KvCache::
  // replicate); a recurrent state stays as it is. For benchmarks at a depth only: the model's
  // output after it means nothing. ErrorKind::unsupported where the state has no KV cache.
  virtual void extend_by_copy(int64_t n);
  // Called by the model's forward once n positions have been evaluated.
  void advance(int64_t n) { n_past_ += n; }

 protected:
  ModelState(int64_t n_ctx, int32_t n_batch) : n_ctx_(n_ctx), n_batch_(n_batch) {}
  int64_t n_past_ = 0;
  int64_t n_ctx_;
  int32_t n_batch_;
};

enum class LogitsMode {
  none,  // only advance the state
  last,  // logits of the last token: (1, n_vocab)
  all,   // logits of every token: (n_tokens, n_vocab)
};

// Called after each named intermediate when set (llama.cpp's names: "attn_norm", "Qcur_normed",
// "kqv_out", "ffn_inp", "ffn_moe_out", "l_out", "result_norm", ...). data is backend memory of
// (rows, cols) floats; layer is -1 outside blocks.
using DebugHook = std::function<void(std::string_view name, int32_t layer, const float* data,
                                     int64_t rows, int64_t cols)>;

// Builds the executor of routed experts from the per-layer expert weights.
using MoeExecutorFactory =
    std::function<std::unique_ptr<MoeExecutor>(const std::vector<MoeLayerWeights>& layers)>;

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return cfg_; }
  Ops& ops() const { return ops_; }

  // ErrorKind::invalid_arg for n_ctx < 1 or beyond what int32 positions hold, or a bad cache type.
  virtual std::unique_ptr<ModelState> new_state(const StateOptions& o) const = 0;

  // Evaluates tokens at positions [st.n_past(), st.n_past() + n) and advances the state. Inputs
  // longer than the state's n_batch are processed in steps. logits: host memory for the mode's
  // shape (ignored for none). ErrorKind::context (state unchanged) when the tokens do not fit.
  virtual void forward(ModelState& st, std::span<const int32_t> tokens, LogitsMode mode,
                       float* logits) = 0;

  void set_debug_hook(DebugHook h) { debug_ = std::move(h); }
  const std::vector<MoeLayerWeights>& moe_layers() const { return moe_layers_; }

 protected:
  Model(ModelConfig cfg, Ops& ops) : cfg_(std::move(cfg)), ops_(ops) {}
  void debug(std::string_view name, int32_t layer, const float* data, int64_t rows, int64_t cols) const {
    if (debug_) debug_(name, layer, data, rows, cols);
  }
  // Runs one forward step. A one-token step (decode) is recorded and launched as one graph
  // (Ops::begin_graph) when the backend has graphs, no debug hook reads intermediates and the MoE
  // executor is capturable; otherwise, or when the recording fails, it runs eagerly. `step` must
  // not change host state it reads (it may run twice: recorded, then eagerly). The executor's
  // begin_step / end_step run eagerly around it.
  void run_step(int64_t n_tokens, MoeExecutor& moe, const std::function<void()>& step);
  void record_step(int64_t n_tokens, const MoeExecutor& moe, const std::function<void()>& step);
  // A MoE step inside run_step's step: an executor that is not capturable runs eagerly between two
  // recorded segments (when the backend records segments; otherwise the step was not recorded).
  void run_moe(MoeExecutor& moe, const MoeStep& req) {
    if (moe.capturable()) {
      moe.run(req);
      return;
    }
    ops_.pause_graph();
    moe.run(req);
    ops_.resume_graph();
  }
  ModelConfig cfg_;
  Ops& ops_;
  std::vector<MoeLayerWeights> moe_layers_;
  DebugHook debug_;
};

// Progress of loading: fraction in [0, 1].
using LoadProgress = std::function<void(float fraction)>;

// Reads the config, checks every tensor the architecture needs (name, shape, type) and builds the
// model. The File must outlive the Model (weights are views into its mapping).
// Backend bytes of one session's state for these options — KV cache, recurrent (DeltaNet) state,
// forward workspace — exactly as new_state() allocates them, measured by building the state on the
// host (untouched pages cost nothing). The offload placement plans with it. ErrorKind::unsupported
// for an unknown architecture, invalid_arg for bad options (as new_state).
struct StateFootprint {
  uint64_t kv_bytes = 0, recurrent_bytes = 0, workspace_bytes = 0;
};
StateFootprint state_footprint(const ModelConfig& c, const StateOptions& o);

std::unique_ptr<Model> load_model(const gguf::File& f, Ops& ops, const MoeExecutorFactory& moe,
                                  const LoadProgress& progress = {});

// The routing of a model's MoE blocks (moe_route's settings from the config) into ids and weights.
RouteArgs route_args(const ModelConfig& c, const float* logits, int32_t* ids, float* weights);

// The forward driver every architecture shares: checks the context and the token ids, splits the
// tokens into steps of at most n_batch, runs step(first, count) for each, asks emit(row, n_rows,
// out) for the logits the mode wants, and advances the state.
void forward_in_batches(ModelState& st, const ModelConfig& c, std::span<const int32_t> tokens,
                        LogitsMode mode, float* logits,
                        const std::function<void(std::span<const int32_t>)>& step,
                        const std::function<void(int64_t row, int64_t n_rows, float* out)>& emit);

}  // namespace ferry
