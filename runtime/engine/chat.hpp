#pragma once
// Multi-turn ChatML conversation over one Session: each turn evaluates only the tokens that are
// new since the previous turn (the KV cache keeps the conversation), then generates the reply.
#include <functional>
#include <string>

#include "runtime/engine/engine.hpp"

namespace ferry {

class Chat {
 public:
  Chat(Session& s, Sampler& sampler, std::string system_prompt = {});

  // One user turn. The reply's tokens are streamed through on_token (an ending EOG included).
  // ErrorKind::context when the turn does not fit in what is left of the context; the
  // conversation is unchanged then (reset() starts over).
  GenerateResult turn(const std::string& user, const GenerateOptions& o,
                      const std::function<void(int32_t)>& on_token);
  void reset();
  int64_t n_past() const { return s_.n_past(); }  // tokens of the conversation in the cache

 private:
  Session& s_;
  Sampler& sampler_;
  std::string system_;
  // How the previous reply ended: its last sampled token (the closing <|im_end|>, or the token
  // that hit the length limit) is evaluated at the start of the next turn.
  bool started_ = false;
  int32_t pending_token_ = -1;     // sampled, not yet evaluated
  bool reply_unclosed_ = false;    // reply stopped without EOG: "<|im_end|>" must be added
};

}  // namespace ferry
