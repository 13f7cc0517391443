#include "runtime/engine/chat.hpp"

#include "runtime/core/error.hpp"

namespace ferry {

Chat::Chat(Session& s, Sampler& sampler, std::string system_prompt)
    : s_(s), sampler_(sampler), system_(std::move(system_prompt)) {}

void Chat::reset() {
  s_.reset();
  sampler_.reset();
  started_ = false;
  pending_token_ = -1;
  reply_unclosed_ = false;
}

GenerateResult Chat::turn(const std::string& user, const GenerateOptions& o,
                          const std::function<void(int32_t)>& on_token) {
  const Tokenizer& tok = s_.model().tokenizer();
  // The text that joins the previous reply to this turn: close the reply if needed, then the
  // "\n" that ChatML puts after <|im_end|>, then the new messages and the assistant header.
  std::string text;
  std::vector<ChatMessage> msgs;
  if (!started_) {
    if (!system_.empty()) msgs.push_back({"system", system_});
  } else {
    if (reply_unclosed_) text += "<|im_end|>";
    text += "\n";
  }
  msgs.push_back({"user", user});
  text += format_chatml(msgs, true);
  std::vector<int32_t> tokens;
  if (started_ && pending_token_ >= 0) tokens.push_back(pending_token_);
  const auto body = tok.encode(text, /*add_bos=*/!started_ && s_.n_past() == 0, /*parse_special=*/true);
  tokens.insert(tokens.end(), body.begin(), body.end());
  if (s_.n_past() + static_cast<int64_t>(tokens.size()) >= s_.n_ctx())
    fail(ErrorKind::context, "context full: the conversation holds {} tokens, this turn needs {} more, the context is {} (/reset to start over, or a larger -c)",
         s_.n_past(), tokens.size(), s_.n_ctx());

  // The server's mechanism (prompt_cache.hpp): the whole conversation is the prompt; the session
  // keeps what it holds of it and saves checkpoints at message starts as it evaluates the rest.
  std::vector<int32_t> prompt = s_.tokens();
  prompt.insert(prompt.end(), tokens.begin(), tokens.end());
  s_.reuse_prefix(prompt);
  s_.prefill(prompt, checkpoint_positions(static_cast<int64_t>(prompt.size()),
                                          chatml_message_starts(tok, prompt), s_.checkpoints().options()));
  for (int32_t t : tokens) sampler_.accept(t);
  GenerateResult r = generate(s_, sampler_, {}, o, on_token);
  started_ = true;
  pending_token_ = -1;
  reply_unclosed_ = false;
  if (r.reason == StopReason::eog) {
    pending_token_ = r.tokens.back();
  } else if (!r.tokens.empty() && !r.last_evaluated) {
    // The last sampled token was not fed back (length limit): evaluate it with the next turn.
    pending_token_ = r.tokens.back();
    reply_unclosed_ = true;
  } else {
    reply_unclosed_ = true;
  }
  return r;
}

}  // namespace ferry
