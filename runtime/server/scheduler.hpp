#pragma once
// The engine thread of `ferry serve`: it owns the model and runs every slot's work, interleaving
// the slots one step at a time (a prompt chunk of at most n_batch tokens, or one sampled token),
// so that N conversations progress together on a model that runs one session at a time.
//
// Slots: n_slots Sessions of n_ctx_slot tokens each (llama-server splits -c evenly the same way).
// Admission: at most n_slots running plus queue_max waiting (FIFO); submit() refuses beyond that
// (the handler answers 503) — the server counts, not the HTTP library's unbounded queue.
// Each job starts from a reset session, so an answer never depends on what the slot ran before.
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
  SessionOptions session;  // type_k/type_v/host memory; n_ctx is n_ctx_slot
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
  void start(Slot& s, std::shared_ptr<Job> job);
  void step(Slot& s);
  void decode_step(Slot& s);
  void finish(Slot& s, const char* reason);
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
  bool accepting_ = true, stop_ = false;
  SchedulerMetrics metrics_;
  std::vector<SlotInfo> infos_;
  std::mutex offload_mu_;
  OffloadMetrics offload_;
  std::chrono::steady_clock::time_point offload_read_{};
  std::thread thread_;
};

}  // namespace ferry::server
