#pragma once
// The `ferry serve` process: HTTP up first (so /health answers 503 while the model loads), then
// the model and the engine thread, then requests until SIGINT/SIGTERM, then a graceful stop.
#include <csignal>
#include <functional>
#include <memory>

#include "runtime/engine/engine.hpp"
#include "runtime/server/server.hpp"

namespace ferry::server {

struct ServeConfig {
  ServerOptions http;
  // Slots and context: n_ctx_total 0 (no -c) takes the loaded model's default_n_ctx(), which
  // ferry serve sets to default_serve_context() and fitting a card may shrink.
  int64_t n_ctx_total = 0;
  int32_t n_batch = 512;
  SessionOptions session;  // KV types, host memory, checkpoints (per slot)
  float slot_similarity = 0.1f;  // -sps (SchedulerOptions::slot_similarity)
};

// SIGINT/SIGTERM blocked in the calling thread, so in every thread it starts from now on (TBB's
// workers included): run_server takes them with sigwait on one thread, and a worker that got
// one first would die of it. SIGPIPE ignored. Call before anything may start a thread.
sigset_t block_stop_signals();

// The context when -c is not given: the model's trained context, shrunk (in steps of 256) until
// n_slots sessions' state fits in half of the host memory that is available — as llama-server
// fits its context to the device. The state of each slot is measured by state_footprint().
int64_t default_serve_context(const ModelConfig& c, int32_t n_slots, const SessionOptions& s);

// Runs the server; `load` loads the model (called once, after the port is bound, which is
// printed: tests start on port 0); `finish` runs after the engine stopped, before the model is
// freed (the observability outputs: --stats, --trace, --record-profile). Returns the exit code
// (0 after a signal).
int run_server(ServeConfig cfg, const std::function<std::unique_ptr<LoadedModel>()>& load,
               const std::function<void(LoadedModel&)>& finish = {});

}  // namespace ferry::server
