#include "runtime/engine/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/host_memory.hpp"
#include "runtime/core/log.hpp"
#include "runtime/model/weights.hpp"
#include "runtime/moe/cpu_experts.hpp"

namespace ferry {

std::unique_ptr<LoadedModel> LoadedModel::load(const std::string& path,
                                               const LoadProgress& progress, const RunOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  RunPlan plan = plan_run(options);  // bad combinations fail before anything is loaded
  std::unique_ptr<LoadedModel> m(new LoadedModel(gguf::File::open(path)));
  m->default_n_ctx_ = options.default_ctx;
  CardBudget card;
  if (plan.fit) {
    // Zero flags on a card: the budget is its free memory less the margin, whatever the model
    // (measured once: the device is made with it, and the fit below splits the same budget).
    card = fit_budget(cuda_mem_info().free_bytes, options.fit);
    plan.cuda_budget_bytes = card.budget_bytes;
  }
  const CpuOps* cpu = nullptr;
  if (plan.backend == DeviceKind::cuda) {
    DeviceOptions d;
    d.budget_bytes = plan.cuda_budget_bytes;
    m->device_ = make_device(DeviceKind::cuda, d);
    m->ops_ = make_cuda_ops(*m->device_, options.backend.cuda);
  } else {
    CpuOpsOptions co = options.backend.cpu;
    if (co.repack) {
      // The interleaved copies of Q4_0/IQ4_NL/MXFP4 matrices take new memory; the mapped file
      // pages they were made from are handed back as each is done.
      if (const std::optional<uint64_t> usable = host_mem_usable())
        co.repack_budget = std::min(co.repack_budget, *usable);
      const gguf::File* file = &m->file_;
      co.repacked = [file](const void* p, size_t bytes) { file->release(p, bytes); };
    }
    auto cpu_ops = std::make_unique<CpuOps>(co);
    cpu = cpu_ops.get();
    m->ops_ = std::move(cpu_ops);
    m->file_.prefault();  // the CPU computes from the mapping itself
  }
  RunOptions o = options;
  if (plan.fit) {
    // Then whether the whole model fits in it, counting the backend's workspaces as the offload
    // plan does; what does not fit is offloaded with the same budget.
    const ModelConfig c = read_config(m->file_);
    const ExpertShape shape{m->file_.tensor(layer_tensor(0, "ffn_gate_exps")).type,
                            m->file_.tensor(layer_tensor(0, "ffn_up_exps")).type,
                            m->file_.tensor(layer_tensor(0, "ffn_down_exps")).type, c.n_embd, c.n_ff_exp};
    const SizesAt sizes = [&](int64_t n_ctx) {
      const int64_t max_batch = std::min<int64_t>(o.n_batch, n_ctx);
      PlacementInput p = placement_input(m->file_, c, n_ctx, o.type_k, o.type_v, o.n_batch, 0);
      p.workspace_bytes += cuda_plan_workspace_bytes(*m->ops_, cuda_extra_workspace_bytes(*m->ops_, c, max_batch));
      p.step_bytes = offload_step_bytes(max_batch, shape, c.n_expert_used, c.n_expert);
      return p;
    };
    const DeviceFit fit =
        fit_to_device(sizes, card, o.fit, o.n_ctx, o.default_ctx > 0 ? o.default_ctx : default_context(c));
    log::info("{}", fit_summary(fit, m->device_->name()));
    o.n_ctx = fit.n_ctx;
    m->default_n_ctx_ = fit.n_ctx;
    if (fit.offload) o.vram_bytes = fit.budget_bytes;
    const uint64_t budget = plan.cuda_budget_bytes;
    plan = plan_run(o);
    plan.cuda_budget_bytes = budget;
  }
  // The offload plan holds the context a session gets without -c (ferry serve's slots' total).
  if (o.n_ctx == 0 && m->default_n_ctx_ > 0) o.n_ctx = m->default_n_ctx_;
  m->moe_ = std::make_unique<MoeSetup>(o, plan);
  // cuda with offloading: the experts stay on the host (the offload engine's store), the rest is
  // uploaded as the model loads.
  const MoeExecutorFactory factory = [&](const std::vector<MoeLayerWeights>& layers) {
    return m->moe_->build(layers, m->file_, *m->ops_);
  };
  m->model_ = load_model(m->file_, *m->ops_, factory, progress);
  if (cpu && cpu->repacked_bytes() > 0)
    log::info("cpu: {:.1f} MiB of Q4_0/IQ4_NL/MXFP4 matrices repacked at load (--no-repack keeps "
              "the file's layout)", static_cast<double>(cpu->repacked_bytes()) / (1 << 20));
  try {
    m->tokenizer_.emplace(Tokenizer::from_gguf(m->file_));
  } catch (const Error& e) {
    m->tokenizer_error_ = e.what();
  }
  m->load_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

LoadedModel::~LoadedModel() = default;

int64_t LoadedModel::default_n_ctx() const {
  return default_n_ctx_ > 0 ? default_n_ctx_ : default_context(config());
}

const Tokenizer& LoadedModel::tokenizer() const {
  if (!tokenizer_)
    fail(ErrorKind::unsupported, "cannot tokenize or detokenize text: {}", tokenizer_error_);
  return *tokenizer_;
}

int64_t default_context(const ModelConfig& c) {
  return std::min<int64_t>(c.n_ctx_train, 4096);
}

namespace {

// A state on the host must fit in the RAM that is free: its pages are committed lazily, so an
// oversized context would otherwise be accepted and fail (or swap) only once the cache fills.
// need: the bytes of the state already made for `so` (untouched pages cost nothing); its parts
// for the message are measured only when it does not fit.
void check_state_fits_host(const ModelConfig& c, const StateOptions& so, uint64_t need, uint64_t limit_bytes) {
  uint64_t usable = limit_bytes;
  if (usable == 0) {
    const std::optional<uint64_t> u = host_mem_usable();
    if (!u) return;  // unknown: let the allocation decide
    usable = *u;
  }
  if (need <= usable) return;
  const StateFootprint fp = state_footprint(c, so);
  const uint64_t per_token = fp.kv_bytes / static_cast<uint64_t>(so.n_ctx);
  const uint64_t fixed = fp.recurrent_bytes + fp.workspace_bytes;
  const uint64_t fits = per_token && usable > fixed ? (usable - fixed) / per_token : 0;
  fail(ErrorKind::budget,
       "a context of {} tokens needs {} of host RAM for its state (KV cache {}: {} per token at K={} V={}; "
       "recurrent state and workspace {}) but {} is available: use -c {} or less, or a smaller KV type "
       "(-ctk/-ctv)",
       so.n_ctx, format_size(need), format_size(fp.kv_bytes), format_size(per_token), type_name(so.type_k),
       type_name(so.type_v), format_size(fixed), format_size(usable), fits);
}

}  // namespace

Session::Session(LoadedModel& m, const SessionOptions& o) : model_(m), checkpoints_(o.prompt_cache) {
  StateOptions so;
  so.n_ctx = o.n_ctx > 0 ? o.n_ctx : m.default_n_ctx();
  so.type_k = o.type_k;
  so.type_v = o.type_v;
  so.n_batch = o.n_batch;
  state_ = m.model().new_state(so);
  if (m.ops().kind() == BackendKind::cpu)
    check_state_fits_host(m.config(), so, state_->bytes(), o.host_memory_bytes);
  if (m.config().n_ctx_train > 0 && so.n_ctx > m.config().n_ctx_train)
    log::warn("the context of {} tokens exceeds the {} the model was trained on: quality may degrade past it",
              so.n_ctx, m.config().n_ctx_train);
  const size_t V = static_cast<size_t>(m.config().n_vocab);
  if (Device* d = m.device()) {
    logits_mem_ = d->alloc_host(V * sizeof(float), true);
  } else {
    void* p = std::aligned_alloc(64, (V * sizeof(float) + 63) / 64 * 64);
    if (!p) fail(ErrorKind::budget, "session: host allocation of {} logits failed", V);
    logits_mem_ = HostBuffer(p, V * sizeof(float), false, [](void* q) { std::free(q); });
  }
  logits_ = std::span<float>(static_cast<float*>(logits_mem_.data()), V);
  std::fill(logits_.begin(), logits_.end(), 0.f);
}

void Session::account(int64_t n, std::chrono::steady_clock::time_point t0) {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (n > 1) {
    timings_.prompt_ms += ms;
    timings_.prompt_tokens += n;
  } else {
    timings_.eval_ms += ms;
    timings_.eval_runs += 1;
  }
}

std::span<const float> Session::eval(std::span<const int32_t> tokens) {
  if (tokens.empty()) return logits_;
  const auto t0 = std::chrono::steady_clock::now();
  model_.model().forward(*state_, tokens, LogitsMode::last, logits_.data());
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  account(static_cast<int64_t>(tokens.size()), t0);
  return logits_;
}

void Session::eval_all(std::span<const int32_t> tokens, float* out) {
  if (tokens.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  model_.model().forward(*state_, tokens, LogitsMode::all, out);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  const size_t V = logits_.size();
  std::copy(out + (tokens.size() - 1) * V, out + tokens.size() * V, logits_.begin());
  account(static_cast<int64_t>(tokens.size()), t0);
}

void Session::reset() {
  state_->reset();
  tokens_.clear();
  checkpoints_.clear();
}

bool Session::keep_prefix(int64_t n) {
  if (n < 0 || n > n_past())
    fail(ErrorKind::invalid_arg, "keep_prefix({}) with {} tokens evaluated", n, n_past());
  if (state_->truncate(n)) {
    tokens_.resize(static_cast<size_t>(n));
    checkpoints_.drop_after(n);
    return true;
  }
  std::vector<int32_t> keep(tokens_.begin(), tokens_.begin() + n);
  go_back(n);
  eval(std::span<const int32_t>(keep).subspan(static_cast<size_t>(n_past())));
  return false;
}

void Session::go_back(int64_t n) {
  if (state_->truncate(n)) {
    tokens_.resize(static_cast<size_t>(n));
    checkpoints_.drop_after(n);
    return;
  }
  const StateCheckpoint* c = checkpoints_.at_or_before(n);
  if (!c) {
    reset();
    return;
  }
  state_->restore_checkpoint(*c);
  tokens_.resize(static_cast<size_t>(c->n_past));
  checkpoints_.drop_after(c->n_past);
}

int64_t Session::reuse_prefix(std::span<const int32_t> prompt) {
  const int64_t most = std::max<int64_t>(static_cast<int64_t>(prompt.size()) - 1, 0);
  const int64_t keep = std::min(common_prefix(tokens_, prompt), most);
  if (keep < n_past()) go_back(keep);
  return n_past();
}

int64_t Session::prefill_step(std::span<const int32_t> prompt, std::span<const int64_t> checkpoint_at) {
  const int64_t done = n_past(), n = static_cast<int64_t>(prompt.size());
  if (done > n || !std::equal(tokens_.begin(), tokens_.end(), prompt.begin()))
    fail(ErrorKind::internal, "prefill: the session's {} tokens are not a prefix of the prompt", done);
  if (done == n) return 0;
  const int64_t end = next_step_end(done, n, state_->n_batch(), checkpoint_at);
  eval(prompt.subspan(static_cast<size_t>(done), static_cast<size_t>(end - done)));
  if (std::find(checkpoint_at.begin(), checkpoint_at.end(), end) != checkpoint_at.end()) save_checkpoint();
  return end - done;
}

std::span<const float> Session::prefill(std::span<const int32_t> prompt, std::span<const int64_t> checkpoint_at) {
  while (prefill_step(prompt, checkpoint_at) > 0) {
  }
  return logits_;
}

bool Session::save_checkpoint() {
  if (!state_->needs_checkpoints()) return false;
  if (checkpoints_.has(n_past())) return true;
  return checkpoints_.add(state_->save_checkpoint());
}

void Session::extend_by_copy(int64_t n) {
  const int64_t have = n_past();
  if (have < 1 || n < have || n > n_ctx())
    fail(ErrorKind::invalid_arg,
         "extend_by_copy to {} positions with {} evaluated and a context of {}", n, have, n_ctx());
  state_->extend_by_copy(n);
  for (int64_t i = have; i < n; ++i) tokens_.push_back(tokens_[static_cast<size_t>(i % have)]);
}

// ---- Generation

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::eog:
      return "end of generation";
    case StopReason::length:
      return "length limit";
    case StopReason::context:
      return "context full";
    case StopReason::interrupted:
      return "interrupted";
  }
  return "?";
}

GenerateResult generate(Session& s, Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& o, const std::function<void(int32_t)>& on_token) {
  GenerateResult res;
  if (!prompt.empty()) {
    s.eval(prompt);
    for (int32_t t : prompt) sampler.accept(t);
  } else if (s.n_past() == 0) {
    fail(ErrorKind::invalid_arg, "generate: empty prompt and empty session");
  }
  const bool has_tok = s.model().has_tokenizer();
  for (int32_t i = 0; o.n_predict < 0 || i < o.n_predict; ++i) {
    if (o.interrupt && o.interrupt->load()) {
      res.reason = StopReason::interrupted;
      return res;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t tok = sampler.sample(s.last_logits());
    sampler.accept(tok);
    auto& tm = s.timings();
    tm.sample_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tm.sample_runs += 1;
    res.tokens.push_back(tok);
    res.last_evaluated = false;
    if (on_token) on_token(tok);
    if (o.stop_at_eog && has_tok && s.model().tokenizer().is_eog(tok)) {
      res.reason = StopReason::eog;
      return res;
    }
    if (o.n_predict >= 0 && i + 1 == o.n_predict) break;
    if (s.n_past() >= s.n_ctx()) {
      res.reason = StopReason::context;
      return res;
    }
    const int32_t one[1] = {tok};
    s.eval(one);
    res.last_evaluated = true;
  }
  res.reason = StopReason::length;
  return res;
}

std::string format_timings(const Timings& t, double load_ms, double total_ms) {
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto rate = [](double ms, int64_t n) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  std::string s;
  s += fmt::format(
      "ferry: sampling time    = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:9.2f} tokens "
      "per second)\n",
      t.sample_ms, t.sample_runs, per(t.sample_ms, t.sample_runs),
      rate(t.sample_ms, t.sample_runs));
  s += fmt::format("ferry: load time        = {:10.2f} ms\n", load_ms);
  s += fmt::format(
      "ferry: prompt eval time = {:10.2f} ms / {:5} tokens ({:8.2f} ms per token, {:9.2f} tokens "
      "per second)\n",
      t.prompt_ms, t.prompt_tokens, per(t.prompt_ms, t.prompt_tokens),
      rate(t.prompt_ms, t.prompt_tokens));
  s += fmt::format(
      "ferry:        eval time = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:9.2f} tokens "
      "per second)\n",
      t.eval_ms, t.eval_runs, per(t.eval_ms, t.eval_runs), rate(t.eval_ms, t.eval_runs));
  s += fmt::format("ferry:       total time = {:10.2f} ms / {:5} tokens\n", total_ms,
                   t.prompt_tokens + t.eval_runs);
  return s;
}

}  // namespace ferry
