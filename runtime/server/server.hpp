#pragma once
// `ferry serve`'s HTTP side: an OpenAI-compatible API with llama-server's conventions (endpoints,
// error envelope, /metrics names) over cpp-httplib 0.11 (Debian's libcpp-httplib).
//
// The library's limits and how the server lives with them:
// - it writes without MSG_NOSIGNAL (a compiled library: the flag cannot be set), so SIGPIPE is
//   ignored process-wide by run_server;
// - its thread pool gives one thread per connection and queues the rest without bound: the pool
//   here (task_pool.hpp) grows past its base size instead of queueing, so /health and /metrics
//   never wait behind streams; generation requests are admitted by the Scheduler (slots + queue)
//   and refused with 503 beyond that;
// - a vanished client is only seen when a write fails: streams send SSE comment pings while the
//   prompt is evaluated or the job waits in the queue, so a disconnect cancels the job within
//   one ping interval or one token; a non-streamed request's socket is found by its peer address
//   (sockets.hpp) and polled for the peer's close while the reply is generated;
// - stop() aborts running streams: on SIGINT/SIGTERM the server first refuses new work (503),
//   lets running requests finish within the grace period, cancels the rest, then stops.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine/chat_format.hpp"
#include "runtime/server/request.hpp"
#include "runtime/server/scheduler.hpp"

namespace ferry::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int32_t n_slots = 1, queue_max = 64;  // -np, --queue (the thread pool is sized from them)
  std::vector<std::string> api_keys;    // empty: no authentication
  size_t max_body_bytes = 8u << 20;
  int timeout_s = 600;      // -to: read/write timeout of a connection (llama-server's default)
  bool metrics = false;     // /metrics (Prometheus); the JSON twin /metrics.json is always on
  int ping_ms = 2000;       // SSE comment interval while a stream has nothing to send
  int grace_s = 10;         // shutdown: time running requests get to finish
  std::string model_alias;  // the id in /v1/models
  std::string model_path;
  RequestDefaults defaults;
  // The chat template and llama-server's chat flags; the BOS/EOS texts are set from the
  // vocabulary once the model is loaded (before the first request can reach it).
  ChatFormat chat;
  // Test only (FERRY_TEST_FORCE_TOKENS, docs/server.md): every generation replies with this
  // file's text (read at each request), then the end-of-turn token, whatever the model says.
  std::string force_tokens_file;
};

// What the handlers share. The scheduler is null while the model loads (/health: 503).
struct ServerContext {
  ServerOptions opt;
  std::atomic<Scheduler*> scheduler{nullptr};
  std::atomic<bool> shutting_down{false};
  std::atomic<uint64_t> next_id{1};
  std::atomic<int> handlers_active{0};
  std::atomic<int> port{0};  // the bound port (find_connection looks a request's socket up by it)
                             // // generation handlers still answering (shutdown waits)
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int64_t created_unix = 0;  // model creation time reported by /v1/models (server start)
};

class HttpServer {
 public:
  explicit HttpServer(ServerContext& ctx);
  ~HttpServer();
  // Binds host:port (ErrorKind::io naming them when it cannot); the port when 0 was asked.
  int bind();
  // Serves until stop(); returns after the in-flight connections ended.
  void listen();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Constant-time comparison (the key must not leak through timing).
bool key_matches(const std::string& given, const std::vector<std::string>& keys);

}  // namespace ferry::server
