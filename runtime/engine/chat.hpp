#pragma once
// A multi-turn conversation over one Session, rendered with the model's chat template
// (chat_format.hpp): each turn renders the whole conversation and the session reuses what it
// holds of it as the server's slots do (prompt_cache.hpp): the longest common prefix is kept, by
// truncating the KV cache or, for a recurrent state, from the checkpoint at or before the point
// where the rendering changed (Qwen3.5 drops the reasoning of earlier turns); only the rest is
// evaluated, so the model always sees what the template says.
#include <functional>
#include <string>

#include "runtime/chat/chat_output.hpp"
#include "runtime/engine/chat_format.hpp"
#include "runtime/engine/engine.hpp"

namespace ferry {

class Chat {
 public:
  Chat(Session& s, Sampler& sampler, const ChatFormat& format, std::string system_prompt = {});

  // One user turn. The reply's text is split as it streams (the format's reasoning format:
  // <think>...</think> into reasoning, the rest content) and handed to on_delta (may be empty). The reply joins
  // the conversation as the template's assistant message (content and reasoning_content).
  // ErrorKind::context when the turn does not fit in what is left of the context; the
  // conversation is unchanged then (reset() starts over). Template errors as render_chat's.
  GenerateResult turn(const std::string& user, const GenerateOptions& o,
                      const std::function<void(const chat::ChatDelta&)>& on_delta);
  void reset();
  int64_t n_past() const { return s_.n_past(); }  // tokens of the conversation in the cache
  // Whether the last turn reused nothing of what the session held (no checkpoint before the
  // point where the template rewrote earlier turns).
  bool last_turn_reprocessed() const { return reprocessed_; }

 private:
  Session& s_;
  Sampler& sampler_;
  const ChatFormat& format_;
  std::string system_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  bool reprocessed_ = false;
};

}  // namespace ferry
