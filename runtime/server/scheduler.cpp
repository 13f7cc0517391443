#include "runtime/server/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/server/reply_text.hpp"

namespace ferry::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kOffloadRefresh = std::chrono::milliseconds(250);

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// log-softmax of the raw logits (what the model says, before any sampler filter, as llama-server
// reports by default) for the chosen token and the `top` most likely ones.
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int32_t top) {
  float max_l = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_l = std::max(max_l, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_l));
  const float log_z = max_l + static_cast<float>(std::log(sum));
  TokenLogprob lp;
  lp.id = id;
  lp.logprob = logits[static_cast<size_t>(id)] - log_z;
  if (top > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min(ids.size(), static_cast<size_t>(top));
    std::partial_sort(
        ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
        [&](int32_t a, int32_t b) {
          return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                 (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
        });
    for (size_t i = 0; i < k; ++i)
      lp.top.emplace_back(ids[i], logits[static_cast<size_t>(ids[i])] - log_z);
  }
  return lp;
}

Event cancelled_event() {
  Event e;
  e.kind = Event::Kind::error;
  e.status = 503;
  e.error_type = "unavailable_error";
  e.message = "the request was cancelled (client gone or server shutting down)";
  return e;
}

}  // namespace

struct Scheduler::Slot {
  int32_t id = 0;
  std::unique_ptr<Session> session;
  std::shared_ptr<Job> job;  // null: free
  std::optional<Sampler> sampler;
  std::optional<ReplyText> text;
  size_t n_prefilled = 0;  // prompt tokens in the session so far (reused or evaluated)
  std::vector<int64_t> checkpoint_at;  // where this job's prefill saves checkpoints
  uint64_t last_used = 0;             // use_clock_ when a job last started here
  ReplyStats stats;
  std::vector<TokenLogprob> pending_logprobs;  // tokens whose text is still held
  std::vector<float> biased_logits;  // (n_vocab) scratch: logits + the request's logit_bias
};

Scheduler::Scheduler(LoadedModel& m, const SchedulerOptions& o) : model_(m), o_(o) {
  if (o_.n_slots < 1) fail(ErrorKind::invalid_arg, "-np {}: need at least one slot", o_.n_slots);
  if (o_.queue_max < 0) fail(ErrorKind::invalid_arg, "--queue {}: must be >= 0", o_.queue_max);
  if (o_.n_batch < 1) fail(ErrorKind::invalid_arg, "-b {}: must be >= 1", o_.n_batch);
  SessionOptions so = o_.session;
  so.n_ctx = o_.n_ctx_slot;
  so.n_batch = o_.n_batch;
  for (int32_t i = 0; i < o_.n_slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->id = i;
    s->session = std::make_unique<Session>(m, so);
    infos_.push_back({i, s->session->n_ctx(), false, 0, 0, 0, 0, 0, 0, 0});
    slots_.push_back(std::move(s));
  }
  o_.n_ctx_slot = slots_[0]->session->n_ctx();
  offload_ = read_offload_metrics(model_);
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    for (auto& j : queue_) j->cancelled = true;
    for (auto& s : slots_)
      if (s->job) s->job->cancelled = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Scheduler::Admit Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lk(mu_);
    if (!accepting_) return Admit::stopping;
    if (active_ + static_cast<int32_t>(queue_.size()) >= o_.n_slots + o_.queue_max) {
      ++metrics_.requests_rejected_total;
      return Admit::full;
    }
    job->submitted = Clock::now();
    if (active_ >= o_.n_slots) ++metrics_.requests_deferred_total;
    ++metrics_.requests_total;
    queue_.push_back(job);
    metrics_.requests_deferred = static_cast<int32_t>(queue_.size());
  }
  cv_.notify_all();
  return Admit::ok;
}

void Scheduler::stop_accepting() {
  std::lock_guard lk(mu_);
  accepting_ = false;
}

bool Scheduler::idle() {
  std::lock_guard lk(mu_);
  return active_ == 0 && queue_.empty();
}

bool Scheduler::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return active_ == 0 && queue_.empty(); });
}

void Scheduler::cancel_all() {
  std::lock_guard lk(mu_);
  for (auto& j : queue_) j->cancelled = true;
  for (auto& s : slots_)
    if (s->job) s->job->cancelled = true;
}

SchedulerMetrics Scheduler::metrics() {
  std::lock_guard lk(mu_);
  return metrics_;
}

std::vector<SlotInfo> Scheduler::slots() {
  std::lock_guard lk(mu_);
  return infos_;
}

OffloadMetrics Scheduler::offload_metrics() {
  std::lock_guard lk(offload_mu_);
  return offload_;
}

void Scheduler::refresh_offload_metrics(bool force) {
  if (!force && Clock::now() - offload_read_ < kOffloadRefresh) return;
  offload_read_ = Clock::now();
  OffloadMetrics m = read_offload_metrics(model_);
  std::lock_guard lk(offload_mu_);
  offload_ = std::move(m);
}

void Scheduler::run() {
  for (;;) {
    std::vector<Slot*> running;
    {
      std::unique_lock lk(mu_);
      // Fill free slots from the queue (FIFO); jobs cancelled while waiting are dropped.
      while (!queue_.empty() && active_ < o_.n_slots) {
        std::shared_ptr<Job> j = std::move(queue_.front());
        queue_.pop_front();
        if (j->cancelled) {
          ++metrics_.requests_cancelled_total;
          j->events.push(cancelled_event());
          continue;
        }
        Slot* s = choose_slot(*j);
        ++active_;
        s->job = j;
        s->last_used = ++use_clock_;
        SlotInfo& info = infos_[static_cast<size_t>(s->id)];
        info.is_processing = true;
        info.id_task = j->id;
        info.n_prompt_tokens = static_cast<int64_t>(j->prompt.size());
        info.n_decoded = 0;
        info.n_cached = 0;
      }
      metrics_.requests_deferred = static_cast<int32_t>(queue_.size());
      metrics_.requests_processing = active_;
      if (queue_.empty()) idle_cv_.notify_all();
      for (auto& s : slots_)
        if (s->job) running.push_back(s.get());
      if (running.empty()) {
        if (stop_) break;
        cv_.wait_for(lk, kOffloadRefresh);
      }
    }
    if (running.empty()) {
      refresh_offload_metrics(false);
      continue;
    }
    for (Slot* s : running) {
      if (!s->sampler) start(*s, s->job);
      if (!s->job) continue;  // refused at start
      if (s->job->cancelled) {
        finish(*s, "cancelled");
        continue;
      }
      try {
        step(*s);
      } catch (const Error& e) {
        fail_job(*s, 500, "server_error", e.what());
      } catch (const std::exception& e) {
        fail_job(*s, 500, "server_error", fmt::format("internal error: {}", e.what()));
      }
    }
    refresh_offload_metrics(false);
  }
  refresh_offload_metrics(true);
}

Scheduler::Slot* Scheduler::choose_slot(const Job& job) {
  Slot* best = nullptr;
  int64_t best_lcp = 0;
  if (o_.slot_similarity > 0 && job.req.cache_prompt && !job.prompt.empty()) {
    for (auto& s : slots_) {
      if (s->job) continue;
      const int64_t lcp = common_prefix(s->session->tokens(), job.prompt);
      const double similarity = static_cast<double>(lcp) / static_cast<double>(job.prompt.size());
      if (lcp > best_lcp && similarity > o_.slot_similarity) {
        best = s.get();
        best_lcp = lcp;
      }
    }
  }
  if (best) return best;
  for (auto& s : slots_)
    if (!s->job && (!best || s->last_used < best->last_used)) best = s.get();
  return best;
}

void Scheduler::start(Slot& s, std::shared_ptr<Job> job) {
  s.stats = {};
  s.pending_logprobs.clear();
  try {
    s.sampler.emplace(job->req.sampling);
  } catch (const Error& e) {
    fail_job(s, 400, "invalid_request_error", e.what());
    return;
  }
  s.text.emplace(model_.tokenizer(), job->req.stop);
  if (job->req.cache_prompt) {
    s.session->reuse_prefix(job->prompt);
  } else {
    s.session->reset();
  }
  s.n_prefilled = static_cast<size_t>(s.session->n_past());
  // The reused tokens are prompt tokens too: the penalties see every one, as generate() shows them.
  for (size_t i = 0; i < s.n_prefilled; ++i) s.sampler->accept(job->prompt[i]);
  const Tokenizer& vocab = model_.tokenizer();
  s.checkpoint_at = checkpoint_positions(static_cast<int64_t>(job->prompt.size()),
                                         chatml_message_starts(vocab, job->prompt),
                                         s.session->checkpoints().options());
  s.stats.n_cached = static_cast<int64_t>(s.n_prefilled);
  s.stats.n_prompt = static_cast<int64_t>(job->prompt.size()) - s.stats.n_cached;
  std::lock_guard lk(mu_);
  infos_[static_cast<size_t>(s.id)].n_cached = s.stats.n_cached;
}

void Scheduler::step(Slot& s) {
  Job& j = *s.job;
  if (s.n_prefilled < j.prompt.size()) {
    // One step of the prompt (it may end early at a checkpoint); every prompt token is shown to
    // the penalties, as generate() does.
    const auto t0 = Clock::now();
    const size_t n = static_cast<size_t>(s.session->prefill_step(j.prompt, s.checkpoint_at));
    for (size_t i = 0; i < n; ++i) s.sampler->accept(j.prompt[s.n_prefilled + i]);
    const double ms = ms_since(t0);
    s.n_prefilled += n;
    s.stats.prompt_ms += ms;
    std::lock_guard lk(mu_);
    metrics_.prompt_tokens_total += n;
    metrics_.prompt_seconds_total += ms / 1e3;
    metrics_.n_decode_total += 1;
    return;
  }
  decode_step(s);
}

// One token, as generate() runs it: sample → accept → (end of generation | length | context) →
// evaluate the token for the next step.
void Scheduler::decode_step(Slot& s) {
  Job& j = *s.job;
  const auto t0 = Clock::now();
  const std::span<const float> logits = s.session->last_logits();
  std::span<const float> biased = logits;
  if (!j.req.logit_bias.empty()) {
    s.biased_logits.assign(logits.begin(), logits.end());
    for (const auto& [id, bias] : j.req.logit_bias)
      s.biased_logits[static_cast<size_t>(id)] += bias;
    biased = s.biased_logits;
  }
  const int32_t tok = s.sampler->sample(biased);
  s.sampler->accept(tok);
  s.stats.n_predicted += 1;
  const Tokenizer& vocab = model_.tokenizer();
  const bool eog = vocab.is_eog(tok);
  if (j.req.logprobs && !eog)
    s.pending_logprobs.push_back(token_logprob(logits, tok, j.req.top_logprobs));
  std::string piece = eog ? std::string() : s.text->push(tok);
  const char* reason = nullptr;
  if (eog || s.text->stopped()) {
    reason = "stop";
  } else if (j.req.max_tokens >= 0 && s.stats.n_predicted >= j.req.max_tokens) {
    reason = "length";
  } else if (s.session->n_past() >= s.session->n_ctx()) {
    reason = "length";  // the slot's context is full
  } else {
    const int32_t one[1] = {tok};
    s.session->eval(one);
  }
  const double ms = ms_since(t0);
  s.stats.predicted_ms += ms;
  {
    std::lock_guard lk(mu_);
    metrics_.tokens_predicted_total += 1;
    metrics_.tokens_predicted_seconds_total += ms / 1e3;
    if (!reason) metrics_.n_decode_total += 1;
    infos_[static_cast<size_t>(s.id)].n_decoded = s.stats.n_predicted;
  }
  if (!piece.empty()) {
    Event e;
    e.kind = Event::Kind::text;
    e.text = std::move(piece);
    e.logprobs = std::move(s.pending_logprobs);
    s.pending_logprobs.clear();
    j.events.push(std::move(e));
  }
  if (reason) finish(s, reason);
}

void Scheduler::finish(Slot& s, const char* reason) {
  Job& j = *s.job;
  const bool cancelled = std::string_view(reason) == "cancelled";
  if (cancelled) {
    j.events.push(cancelled_event());  // seen only by a handler still waiting (shutdown)
  } else {
    Event e;
    e.kind = Event::Kind::done;
    e.text = s.text->finish();
    e.logprobs = std::move(s.pending_logprobs);
    e.finish_reason = reason;
    if (s.text->stopped()) e.stop_word = s.text->stop_word();
    e.stats = s.stats;
    j.events.push(std::move(e));
  }
  s.pending_logprobs.clear();
  s.sampler.reset();
  s.text.reset();
  s.job.reset();
  std::lock_guard lk(mu_);
  if (cancelled) ++metrics_.requests_cancelled_total;
  --active_;
  metrics_.requests_processing = active_;
  note_cache(s);
  idle_cv_.notify_all();
}

void Scheduler::note_cache(Slot& s) {
  SlotInfo& info = infos_[static_cast<size_t>(s.id)];
  info.is_processing = false;
  info.n_cache_tokens = s.session->n_past();
  info.n_checkpoints = static_cast<int32_t>(s.session->checkpoints().size());
  info.checkpoint_bytes = s.session->checkpoints().bytes();
}

void Scheduler::fail_job(Slot& s, int status, const std::string& type, const std::string& message) {
  log::warn("serve: request {} failed: {}", s.job->id, message);
  Event e;
  e.kind = Event::Kind::error;
  e.status = status;
  e.error_type = type;
  e.message = message;
  s.job->events.push(std::move(e));
  s.session->reset();  // whatever the failure left in the state is not reused
  s.pending_logprobs.clear();
  s.sampler.reset();
  s.text.reset();
  s.job.reset();
  std::lock_guard lk(mu_);
  --active_;
  metrics_.requests_processing = active_;
  note_cache(s);
  idle_cv_.notify_all();
}

}  // namespace ferry::server
