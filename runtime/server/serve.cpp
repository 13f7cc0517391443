#include "runtime/server/serve.hpp"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/host_store.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/server/sockets.hpp"

namespace ferry::server {
namespace {

// The signal thread's word to the main thread: 1 on the first SIGINT/SIGTERM, 2 on the second.
struct SignalState {
  std::mutex mu;
  std::condition_variable cv;
  int signals = 0;
  bool done = false;  // the server is over: the signal thread leaves on its next wake-up
};

}  // namespace

sigset_t block_stop_signals() {
  // httplib writes with flags 0: a write to a closed socket raises SIGPIPE, fatal by default.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
  return stop_set;
}

int64_t default_serve_context(const ModelConfig& c, int32_t n_slots, const SessionOptions& s) {
  constexpr int64_t kStep = 256;
  const int64_t train = c.n_ctx_train > 0 ? c.n_ctx_train : 4096;
  const std::optional<uint64_t> usable = host_mem_usable();
  if (!usable) return train;
  const uint64_t limit = *usable / 2;
  // The bytes of n_slots states holding `total` tokens between them.
  const auto bytes = [&](int64_t total) {
    StateOptions so;
    so.n_ctx = total / n_slots;
    so.type_k = s.type_k;
    so.type_v = s.type_v;
    so.n_batch = s.n_batch;
    const StateFootprint fp = state_footprint(c, so);
    return (fp.kv_bytes + fp.recurrent_bytes + fp.workspace_bytes) * static_cast<uint64_t>(n_slots);
  };
  const int64_t lo = kStep * n_slots;
  // The state grows linearly with the context (KV rows); measured at two small sizes, the line
  // gives the largest total that fits, checked (and stepped down) against the real footprint —
  // never built for a context that the line already says is too large.
  const uint64_t b1 = bytes(lo), b2 = bytes(2 * lo);
  if (b1 > limit)
    fail(ErrorKind::budget,
         "not even {} tokens per slot fit in half of the available host memory ({} slots): use -c, "
         "fewer slots (-np) or a smaller KV type",
         kStep, n_slots);
  const double per_token = static_cast<double>(b2 - b1) / static_cast<double>(lo);
  const double fits =
      per_token > 0 ? static_cast<double>(lo) + static_cast<double>(limit - b1) / per_token : 1e18;
  int64_t total = fits >= static_cast<double>(train) ? train : static_cast<int64_t>(fits) / lo * lo;
  while (total > lo && bytes(total) > limit) total -= lo;
  return std::max(total, lo);
}

int run_server(ServeConfig cfg, const std::function<std::unique_ptr<LoadedModel>()>& load,
               const std::function<void(LoadedModel&)>& finish) {
  const sigset_t stop_set = block_stop_signals();
  SignalState sig;
  std::thread signal_thread([&] {
    for (;;) {
      int got = 0;
      sigwait(&stop_set, &got);
      std::lock_guard lk(sig.mu);
      if (sig.done) return;
      ++sig.signals;
      sig.cv.notify_all();
    }
  });
  const pthread_t signal_handle = signal_thread.native_handle();
  auto end_signal_thread = [&] {
    {
      std::lock_guard lk(sig.mu);
      sig.done = true;
    }
    pthread_kill(signal_handle, SIGTERM);  // wakes its sigwait
    signal_thread.join();
  };

  ServerContext ctx;
  ctx.opt = cfg.http;
  ctx.created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<HttpServer> http;
  std::thread http_thread;
  int port = 0;
  std::atomic<bool> listen_returned{false};
  try {
    http = std::make_unique<HttpServer>(ctx);
    port = http->bind();
    raise_listen_backlog(port);
    ctx.port = port;
    std::fprintf(stderr, "ferry serve: listening on http://%s:%d (loading the model)\n",
                 cfg.http.host.c_str(), port);
    http_thread = std::thread([&] {
      http->listen();
      listen_returned = true;
    });
    model = load();
    if (!model->has_tokenizer()) (void)model->tokenizer();  // throws, naming why
    // Before the scheduler is published: the handlers read ctx.opt only once it is.
    set_special_texts(ctx.opt.chat, model->tokenizer());
    SchedulerOptions so;
    so.n_slots = cfg.http.n_slots;
    so.queue_max = cfg.http.queue_max;
    so.n_batch = cfg.n_batch;
    so.session = cfg.session;
    so.slot_similarity = cfg.slot_similarity;
    const int64_t total = cfg.n_ctx_total > 0 ? cfg.n_ctx_total : model->default_n_ctx();
    so.n_ctx_slot = total / so.n_slots;
    if (so.n_ctx_slot < 8)
      fail(ErrorKind::invalid_arg, "-c {} split over {} slots leaves {} tokens per slot: too small",
           total, so.n_slots, so.n_ctx_slot);
    sched = std::make_unique<Scheduler>(*model, so);
    ctx.scheduler = sched.get();
    std::fprintf(stderr,
                 "ferry serve: ready: %d slots of %lld tokens (-c %lld), queue %d, model %s\n",
                 so.n_slots, static_cast<long long>(sched->options().n_ctx_slot),
                 static_cast<long long>(total), so.queue_max, cfg.http.model_path.c_str());
  } catch (...) {
    if (http) http->stop();
    if (http_thread.joinable()) http_thread.join();
    end_signal_thread();
    throw;
  }

  {
    std::unique_lock lk(sig.mu);
    sig.cv.wait(lk, [&] { return sig.signals > 0; });
  }
  // Graceful stop: refuse new work, let running requests finish, cancel what is left after the
  // grace period (or on a second signal), then close the listener (which ends the streams).
  std::fprintf(stderr,
               "ferry serve: stopping (running requests get %d s; signal again to cancel them)\n",
               cfg.http.grace_s);
  ctx.shutting_down = true;
  sched->stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.http.grace_s);
  while (!sched->wait_idle(std::chrono::milliseconds(100))) {
    std::lock_guard lk(sig.mu);
    if (sig.signals > 1 || std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "ferry serve: cancelling the requests still running\n");
      sched->cancel_all();
      sched->wait_idle(std::chrono::seconds(5));
      break;
    }
  }
  // The handlers still writing their last events finish before the listener closes (which would
  // cut their streams); bounded, as a client may not read.
  for (int i = 0; i < 200 && ctx.handlers_active.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http->stop();
  for (int i = 0; i < 100 && !listen_returned; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!listen_returned) shut_down_connections(port);
  http_thread.join();
  ctx.scheduler = nullptr;
  sched.reset();
  end_signal_thread();
  if (finish) finish(*model);
  std::fprintf(stderr, "ferry serve: stopped\n");
  return 0;
}

}  // namespace ferry::server
