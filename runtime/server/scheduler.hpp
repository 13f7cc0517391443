#pragma once
// The engine thread of `ferry serve`: it owns the model and runs every slot's work, interleaving
// the slots one step at a time (a prompt chunk of at most n_batch tokens, or one sampled token),
// so that N conversations progress together on a model that runs one session at a time.
//
// Slots: n_slots Sessions of n_ctx_slot tokens each (llama-server splits -c evenly the same way).
// Admission: at most n_slots running plus queue_max waiting (FIFO); submit() refuses beyond that
// (the handler answers 503) — the server counts, not the HTTP library's unbounded queue.
// Prompt reuse (runtime/engine/prompt_cache.hpp): a slot keeps the tokens of its last job, and a
// job whose prompt starts with some of them continues from there — the attention caches truncated
// to the common prefix, a recurrent state restored from the slot's nearest checkpoint at or before
// it. Reuse changes how the prompt is split into steps, not what is computed: the answer is that
// of a session that evaluated the same tokens in the same steps (greedy tokens match a full
// re-prefill; docs/server.md). A request with cache_prompt: false starts from a reset session.
// Slot choice among the free slots (llama-server's): the longest common prefix whose share of the
// prompt exceeds slot_similarity (-sps), else the least recently used slot.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/engine/engine.hpp"
#include "runtime/server/job.hpp"
#include "runtime/server/offload_metrics.hpp"

namespace ferry::server {

struct SchedulerOptions {
  int32_t n_slots = 1;
  int64_t n_ctx_slot = 0;  // tokens per slot
  int32_t n_batch = 512;   // prompt tokens per step
  int32_t queue_max = 64;
  float slot_similarity = 0.1f;  // -sps: share of the prompt a slot's cache must match (0: off)
  SessionOptions session;  // type_k/type_v/host memory/checkpoints; n_ctx is n_ctx_slot
};

// Counters of llama-server's /metrics, and Ferry's request counters.
struct SchedulerMetrics {
  uint64_t prompt_tokens_total = 0;
  double prompt_seconds_total = 0;
  uint64_t tokens_predicted_total = 0;
  double tokens_predicted_seconds_total = 0;
  uint64_t n_decode_total = 0;  // model forward calls
  uint64_t requests_total = 0, requests_rejected_total = 0, requests_cancelled_total = 0;
  uint64_t requests_deferred_total = 0;                    // had to wait in the queue
  int32_t requests_processing = 0, requests_deferred = 0;  // now: in a slot, in the queue
};

struct SlotInfo {
  int32_t id = 0;
  int64_t n_ctx = 0;
  bool is_processing = false;
  uint64_t id_task = 0;
  int64_t n_prompt_tokens = 0, n_decoded = 0;
  int64_t n_cached = 0;            // prompt tokens of the job reused from the slot's cache
  int64_t n_cache_tokens = 0;      // tokens the slot holds now
  int32_t n_checkpoints = 0;       // recurrent-state checkpoints held
  uint64_t checkpoint_bytes = 0;   // their host memory
};

class Scheduler {
 public:
  Scheduler(LoadedModel& m, const SchedulerOptions& o);
  ~Scheduler();  // stops and joins the engine thread

  enum class Admit { ok, full, stopping };
  // From any thread. ok: queued (events will follow on job->events).
  Admit submit(const std::shared_ptr<Job>& job);
  // Shutdown: refuse new jobs; then idle() turns true once running and queued jobs are done.
  void stop_accepting();
  bool idle();
  void cancel_all();  // the grace period is over
  bool wait_idle(std::chrono::milliseconds timeout);

  SchedulerMetrics metrics();
  OffloadMetrics offload_metrics();  // as of the last refresh (at most ~250 ms old)
  std::vector<SlotInfo> slots();
  const SchedulerOptions& options() const { return o_; }
  LoadedModel& model() { return model_; }

 private:
  struct Slot;
  void run();
  Slot* choose_slot(const Job& job);  // a free slot for job (mu_ held), or nullptr
  void start(Slot& s, std::shared_ptr<Job> job);
  void step(Slot& s);
  void decode_step(Slot& s);
  void finish(Slot& s, const char* reason);
  void note_cache(Slot& s);  // the slot's infos_ once its job is over (mu_ held)
  void fail_job(Slot& s, int status, const std::string& type, const std::string& message);
  void refresh_offload_metrics(bool force);

  LoadedModel& model_;
  SchedulerOptions o_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mu_;  // queue_, accepting_, stop_, metrics_, slot infos, the slots' job pointers
  std::condition_variable cv_;       // engine: work arrived / stop
  std::condition_variable idle_cv_;  // shutdown: a job finished
  std::deque<std::shared_ptr<Job>> queue_;
  int32_t active_ = 0;
  uint64_t use_clock_ = 0;  // counts job starts: a slot's last_used orders slots by recency
  bool accepting_ = true, stop_ = false;
  SchedulerMetrics metrics_;
  std::vector<SlotInfo> infos_;
  std::mutex offload_mu_;
  OffloadMetrics offload_;
  std::chrono::steady_clock::time_point offload_read_{};
  std::thread thread_;
};

}  // namespace ferry::server
