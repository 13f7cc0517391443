#include "runtime/engine/chat.hpp"

#include "runtime/chat/chat_render.hpp"
#include "runtime/engine/prompt_cache.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

Chat::Chat(Session& s, Sampler& sampler, const ChatFormat& format, std::string system_prompt)
    : s_(s), sampler_(sampler), format_(format), system_(std::move(system_prompt)) {
  reset();
}

void Chat::reset() {
  s_.reset();
  sampler_.reset();
  messages_ = nlohmann::ordered_json::array();
  if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  reprocessed_ = false;
}

GenerateResult Chat::turn(const std::string& user, const GenerateOptions& o,
                          const std::function<void(const chat::ChatDelta&)>& on_delta) {
  const Tokenizer& tok = s_.model().tokenizer();
  nlohmann::ordered_json body = {{"messages", messages_}};
  body["messages"].push_back({{"role", "user"}, {"content", user}});
  const chat::ChatRequest req = chat::parse_chat_request(body, format_.defaults);
  const std::string prompt = chat::render_chat(*format_.tmpl, req.inputs);

  // The server's mechanism (prompt_cache.hpp): the whole rendered conversation is the prompt; the
  // session keeps the longest prefix of it that it holds — by truncation, or for a recurrent state
  // from the checkpoint at or before where the rendering changed (Qwen3.5 drops the reasoning of
  // earlier turns) — and saves checkpoints at message starts as it evaluates the rest.
  const std::vector<int32_t> tokens = tok.encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
  if (static_cast<int64_t>(tokens.size()) >= s_.n_ctx())
    fail(ErrorKind::context,
         "context full: the conversation needs {} tokens, the context is {} (/reset to start "
         "over, or a larger -c)",
         tokens.size(), s_.n_ctx());
  const int64_t held = s_.n_past();
  const int64_t kept = s_.reuse_prefix(tokens);
  reprocessed_ = held > 0 && kept == 0;
  s_.prefill(tokens, checkpoint_positions(static_cast<int64_t>(tokens.size()), chatml_message_starts(tok, tokens),
                                          s_.checkpoints().options()));
  for (size_t i = static_cast<size_t>(kept); i < tokens.size(); ++i) sampler_.accept(tokens[i]);

  chat::ChatOutputParser parser(chat::chat_parse_options(req, prompt));
  TextStream text(tok, /*render_special=*/true);  // the end-of-turn token's text too
  std::string reply;
  GenerateResult r = generate(s_, sampler_, {}, o, [&](int32_t id) {
    const std::string piece = text.push(id);
    reply += piece;
    // The end-of-turn token closes the message; it is not the reply's text.
    if (!tok.is_eog(id) && on_delta) on_delta(parser.feed(piece));
  });
  reply += text.flush();
  const chat::ChatDelta rest = parser.finish();
  if (!rest.empty() && on_delta) on_delta(rest);

  messages_ = std::move(body["messages"]);
  const chat::ChatMessage& m = parser.message();
  std::string content = m.content;
  if (m.reasoning_content.empty() && m.tool_calls.empty()) {
    // As llama-cli keeps it: the reply as generated (the parser trims whitespace).
    content = reply;
    const std::string end =
        r.reason == StopReason::eog ? tok.token_bytes(r.tokens.back(), true) : std::string();
    if (!end.empty() && content.ends_with(end)) content.resize(content.size() - end.size());
  }
  nlohmann::ordered_json msg = {{"role", "assistant"}, {"content", content}};
  if (!m.reasoning_content.empty()) msg["reasoning_content"] = m.reasoning_content;
  messages_.push_back(std::move(msg));
  return r;
}

}  // namespace ferry
