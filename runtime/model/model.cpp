#include "runtime/model/model.hpp"

#include <algorithm>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/qwen35moe.hpp"
#include "runtime/model/qwen3moe.hpp"

namespace ferry {

bool ModelState::truncate(int64_t n) {
  if (n < 0 || n > n_past_)
    fail(ErrorKind::invalid_arg, "truncate to {} positions: the state holds {}", n, n_past_);
  n_past_ = n;
  return true;
}

StateCheckpoint ModelState::save_checkpoint() const { return StateCheckpoint{n_past_, {}}; }

void ModelState::restore_checkpoint(const StateCheckpoint& c) {
  if (!c.buffers.empty())
    fail(ErrorKind::invalid_arg, "restore: the checkpoint holds {} recurrent buffers, this state none",
         c.buffers.size());
  if (!truncate(c.n_past))
    fail(ErrorKind::internal, "restore to {} positions: the state cannot truncate", c.n_past);
}

void ModelState::extend_by_copy(int64_t) {
  fail(ErrorKind::unsupported, "this model's state cannot be extended by copying its KV cache");
}

std::unique_ptr<Model> load_model(const gguf::File& f, Ops& ops, const MoeExecutorFactory& moe,
                                  const LoadProgress& progress) {
  ModelConfig cfg = read_config(f);
  switch (cfg.arch) {
    case Arch::qwen3moe: return make_qwen3moe(f, std::move(cfg), ops, moe, progress);
    case Arch::qwen35moe: return make_qwen35moe(f, std::move(cfg), ops, moe, progress);
    case Arch::qwen3next: return make_qwen3next(f, std::move(cfg), ops, moe, progress);
    default: break;
  }
  fail(ErrorKind::unsupported, "architecture '{}' in {} is not supported (supported: {})",
       arch_name(cfg.arch), f.path(), supported_architectures());
}

StateFootprint state_footprint(const ModelConfig& c, const StateOptions& o) {
  if (o.n_batch < 1) fail(ErrorKind::invalid_arg, "batch size {} must be >= 1", o.n_batch);
  CpuOps ops;  // host pages the constructor does not write are never touched
  switch (c.arch) {
    case Arch::qwen3moe: return qwen3moe_state_footprint(ops, c, o);
    case Arch::qwen35moe:
    case Arch::qwen3next: return hybrid_state_footprint(ops, c, o);
    default: break;
  }
  fail(ErrorKind::unsupported, "architecture '{}' is not supported (supported: {})", arch_name(c.arch),
       supported_architectures());
}

void Model::run_step(int64_t n_tokens, MoeExecutor& moe, const std::function<void()>& step) {
  moe.begin_step(n_tokens);
  try {
    record_step(n_tokens, moe, step);
  } catch (...) {
    // Part of the step may be queued: the executor still closes it (its refills must wait for
    // those kernels), and the step's own error is the one that propagates.
    try {
      moe.end_step(n_tokens);
    } catch (...) {
    }
    throw;
  }
  moe.end_step(n_tokens);
}

void Model::record_step(int64_t n_tokens, const MoeExecutor& moe, const std::function<void()>& step) {
  const bool segmented = !moe.capturable(), replayable = moe.capturable() && moe.replayable();
  if (n_tokens != 1 || debug_ || !ops_.begin_graph(segmented, replayable)) {
    step();
    return;
  }
  // Twice at most: a replay that finds no recorded graph (graph_retry) records the step next.
  for (int attempt = 0;; ++attempt) {
    try {
      step();
    } catch (const std::exception& e) {
      ops_.abort_graph();
      if (ops_.graph_partially_ran()) throw;  // part of the step ran: it cannot run again
      // Run it eagerly. If that fails too, the error is the step's own (a full context, a bad
      // argument) and propagates with graphs still on; if it works, recording is what failed.
      step();
      ops_.disable_graphs(e.what());
      return;
    }
    if (ops_.end_graph()) return;
    if (attempt > 0 || !ops_.graph_retry() || !ops_.begin_graph(segmented, replayable)) break;
  }
  // The (last) recording was invalid: graphs are off. Nothing of the step ran, unless earlier
  // segments did — then the step cannot run again.
  if (ops_.graph_partially_ran())
    fail(ErrorKind::device,
         "cuda graphs: a step's last segment could not be recorded after its first ran; "
         "--cuda-graphs off runs without graphs");
  step();
}

RouteArgs route_args(const ModelConfig& c, const float* logits, int32_t* ids, float* weights) {
  RouteArgs r;
  r.logits = logits;
  r.n_expert = c.n_expert;
  r.top_k = c.n_expert_used;
  r.renormalize = c.expert_weights_norm;
  r.scale = c.expert_weights_scale;
  r.ids = ids;
  r.weights = weights;
  return r;
}

void forward_in_batches(ModelState& st, const ModelConfig& c, std::span<const int32_t> tokens,
                        LogitsMode mode, float* logits,
                        const std::function<void(std::span<const int32_t>)>& step,
                        const std::function<void(int64_t, int64_t, float*)>& emit) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return;
  if (st.n_past() + n > st.n_ctx())
    fail(ErrorKind::context,
         "context full: {} positions used + {} new tokens exceed the context size of {} (use a larger -c)",
         st.n_past(), n, st.n_ctx());
  for (int32_t t : tokens)
    if (t < 0 || t >= c.n_vocab) fail(ErrorKind::invalid_arg, "token id {} out of range [0, {})", t, c.n_vocab);
  for (int64_t start = 0; start < n; start += st.n_batch()) {
    const int64_t nb = std::min<int64_t>(st.n_batch(), n - start);
    step(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(nb)));
    if (mode == LogitsMode::all) emit(0, nb, logits + start * c.n_vocab);
    else if (mode == LogitsMode::last && start + nb == n) emit(nb - 1, 1, logits);
    st.advance(nb);
  }
}

}  // namespace ferry
