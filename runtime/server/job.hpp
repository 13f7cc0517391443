#pragma once
// One generation request on its way through the server: the HTTP handler thread makes a Job,
// submits it to the Scheduler, and reads the Events the engine thread sends back on its Channel
// (text as it is generated, then done or error). A handler that sees its client gone sets
// `cancelled`; the engine stops that job before its next token step.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/server/request.hpp"

namespace ferry::server {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;                        // natural log of the softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first, top_logprobs of them
};

// A finished request's figures: usage and llama-server's `timings`.
struct ReplyStats {
  int64_t n_prompt = 0;       // prompt tokens evaluated (the prompt's length minus n_cached)
  int64_t n_cached = 0;       // prompt tokens reused from the slot's previous state
  int64_t n_predicted = 0;    // tokens sampled (an ending end-of-generation token included)
  double prompt_ms = 0.0;     // evaluating the prompt
  double predicted_ms = 0.0;  // sampling and evaluating the generated tokens
};

struct Event {
  enum class Kind { text, done, error };
  Kind kind = Kind::text;
  std::string text;                    // text: the next piece of the reply (complete UTF-8)
  std::vector<TokenLogprob> logprobs;  // text/done: the tokens behind `text` when requested
  std::string finish_reason;           // done: "stop" or "length"
  std::string stop_word;               // done: the stop string that ended the reply, if one did
  ReplyStats stats;                    // done
  int status = 0;                      // error: HTTP status
  std::string error_type, message;     // error
};

// Single producer (the engine), single consumer (the handler); unbounded but never longer than
// the tokens of one reply.
class Channel {
 public:
  void push(Event e) {
    {
      std::lock_guard lk(mu_);
      q_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // The next event, or nullopt after `timeout` (the handler then pings or checks its client).
  std::optional<Event> wait(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return std::nullopt;
    Event e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

struct Job {
  uint64_t id = 0;
  GenRequest req;
  std::vector<int32_t> prompt;  // tokens, checked against the slot context before submission
  std::atomic<bool> cancelled{false};
  Channel events;
  std::chrono::steady_clock::time_point submitted;
};

}  // namespace ferry::server
