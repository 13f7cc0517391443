#pragma once
// The engine: a loaded model (GGUF mapping + weights + tokenizer + backend) and sessions over it,
// and the generation loop over a session (prompt → sample → decode → ...).
// A Session owns one conversation's state (KV cache, positions, the tokens evaluated so far) and
// can be reset or continued; several sessions may share one LoadedModel (one at a time).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/engine/moe_setup.hpp"
#include "runtime/engine/prompt_cache.hpp"
#include "runtime/engine/run_options.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/model.hpp"
#include "runtime/sampling/sampler.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry {

class LoadedModel {
 public:
  // mmaps the GGUF, validates config and tensors, builds the backend and the MoE executor with
  // its observers from the run's options (CPU by default; plan_run, run_options.hpp).
  // The tokenizer is optional here (ferry logits --tokens needs none); tokenizer() reports why it
  // is missing. progress: fraction in [0, 1].
  static std::unique_ptr<LoadedModel> load(const std::string& path,
                                           const LoadProgress& progress = {},
                                           const RunOptions& options = {});
  ~LoadedModel();

  const gguf::File& file() const { return file_; }
  Ops& ops() { return *ops_; }
  Device* device() { return device_.get(); }  // the cuda device; nullptr on the cpu backend
  Model& model() { return *model_; }
  MoeSetup& moe() { return *moe_; }
  const ModelConfig& config() const { return model_->config(); }
  bool has_tokenizer() const { return tokenizer_.has_value(); }
  // ErrorKind::unsupported / format naming the file when the GGUF carries no usable tokenizer.
  const Tokenizer& tokenizer() const;
  double load_ms() const { return load_ms_; }
  // The context a session gets without -c: RunOptions::default_ctx, else default_context(); less
  // when fitting the card shrank it (fit.hpp).
  int64_t default_n_ctx() const;

 private:
  explicit LoadedModel(gguf::File f) : file_(std::move(f)) {}
  gguf::File file_;
  std::unique_ptr<Device> device_;  // before ops_: the ops' memory returns to it
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<MoeSetup> moe_;  // before model_: the model's executor reports to its observers
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  std::string tokenizer_error_;
  double load_ms_ = 0.0;
  int64_t default_n_ctx_ = 0;  // 0: default_context()
};

struct SessionOptions {
  int64_t n_ctx = 0;  // 0: the model's default_n_ctx()
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int32_t n_batch = 512;
  // Host RAM the session's state may take when it lives on the host (the cpu backend): 0 means
  // what /proc/meminfo's MemAvailable reports minus a 1 GiB reserve. A context whose KV cache and
  // recurrent state do not fit is refused up front (ErrorKind::budget) with the figures and the
  // largest context that fits; tests lower it.
  uint64_t host_memory_bytes = 0;
  PromptCacheOptions prompt_cache;  // checkpoints of a recurrent state (prompt_cache.hpp)
};

// Wall-clock accounting, as llama.cpp's perf counters: prompt = batches of more than one token,
// eval = single-token decode steps.
struct Timings {
  double prompt_ms = 0.0;
  int64_t prompt_tokens = 0;
  double eval_ms = 0.0;
  int64_t eval_runs = 0;
  double sample_ms = 0.0;
  int64_t sample_runs = 0;
};

class Session {
 public:
  Session(LoadedModel& m, const SessionOptions& o = {});
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Evaluates tokens after those already in the session and returns the logits of the last one
  // (n_vocab floats, valid until the next call). ErrorKind::context when they do not fit; the
  // session is unchanged then.
  std::span<const float> eval(std::span<const int32_t> tokens);
  // As eval, writing the logits of every token to out (tokens.size() × n_vocab floats).
  void eval_all(std::span<const int32_t> tokens, float* out);
  // Drops everything (new conversation).
  void reset();
  // Keeps the first n evaluated tokens (drops the rest); false when the model's state cannot go
  // back (recurrent layers), in which case the session went back to its nearest checkpoint (or
  // was reset) and re-evaluated to n tokens.
  // Evaluate at least one token before using last_logits() again.
  bool keep_prefix(int64_t n);
  // Prompt reuse (prompt_cache.hpp). Keeps the longest prefix of the session's tokens that
  // `prompt` starts with — at most prompt.size() − 1, so that its last token is evaluated again
  // and gives logits — going back by truncation or, for a recurrent state, to the nearest
  // checkpoint at or before it (else resetting). Returns the tokens kept: the prompt's first
  // n_past() tokens are the session's, the rest is to evaluate.
  int64_t reuse_prefix(std::span<const int32_t> prompt);
  // Evaluates the next prefill step of `prompt` (its first n_past() tokens are the session's):
  // up to next_step_end(), saving a checkpoint when the step ends at one of `checkpoint_at`.
  // Returns the tokens evaluated (0 once the whole prompt is).
  int64_t prefill_step(std::span<const int32_t> prompt, std::span<const int64_t> checkpoint_at);
  // prefill_step() until the whole prompt is evaluated; the last token's logits.
  std::span<const float> prefill(std::span<const int32_t> prompt, std::span<const int64_t> checkpoint_at);
  // Saves the state at n_past() as a checkpoint (nothing for a state that truncates); false when
  // the store's limits leave no room for it.
  bool save_checkpoint();
  const CheckpointStore& checkpoints() const { return checkpoints_; }
  // Extends the session to n positions by copying its KV rows (ModelState::extend_by_copy), the
  // token list by repeating it: a context depth for benchmarks without evaluating it. Needs at
  // least one evaluated token; the logits after it mean nothing.
  void extend_by_copy(int64_t n);

  int64_t n_past() const { return state_->n_past(); }
  int64_t n_ctx() const { return state_->n_ctx(); }
  int32_t n_vocab() const { return model_.config().n_vocab; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  std::span<const float> last_logits() const { return logits_; }
  Timings& timings() { return timings_; }
  LoadedModel& model() { return model_; }
  size_t state_bytes() const { return state_->bytes(); }

 private:
  void account(int64_t n, std::chrono::steady_clock::time_point t0);
  // Drops the positions past n, or more when a recurrent state has no checkpoint there: to the
  // nearest checkpoint at or before n, else to 0.
  void go_back(int64_t n);
  LoadedModel& model_;
  std::unique_ptr<ModelState> state_;
  std::vector<int32_t> tokens_;
  // The last evaluated token's logits (n_vocab floats) live in logits_mem_: page-locked memory on
  // a device backend, so that each token's logits copy runs at the link's speed without the
  // driver's pageable staging; ordinary memory on the CPU.
  HostBuffer logits_mem_;
  std::span<float> logits_;
  CheckpointStore checkpoints_;
  Timings timings_;
};

// The default context, the one rule every command and the offload plan use: min(model context, 4096).
int64_t default_context(const ModelConfig& c);

// ---- Generation

enum class StopReason { eog, length, context, interrupted };
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int32_t n_predict = 128;  // tokens to generate at most (< 0: until EOG or the context is full)
  bool stop_at_eog = true;
  const std::atomic<bool>* interrupt = nullptr;  // set (e.g. by SIGINT) to stop after this token
};

struct GenerateResult {
  std::vector<int32_t>
      tokens;  // generated, in order; an EOG token ends the list but was not evaluated
  StopReason reason = StopReason::length;
  // True when the last token of `tokens` is in the session's tokens (evaluated). False after EOG or
  // when the length limit was hit right after sampling (as llama.cpp, the last token is not fed
  // back).
  bool last_evaluated = false;
};

// Evaluates `prompt` (appended to what the session holds; every prompt token is also shown to the
// sampler's repetition history) and generates. on_token is called with each generated token
// (including a final EOG token). If the prompt is empty the session's last logits are used.
GenerateResult generate(Session& s, Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& o, const std::function<void(int32_t)>& on_token);

// Lines like llama.cpp's llama_perf_context_print (load, prompt eval, eval, total), for stderr.
std::string format_timings(const Timings& t, double load_ms, double total_ms);

}  // namespace ferry
