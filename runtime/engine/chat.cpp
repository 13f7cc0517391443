#include "runtime/engine/chat.hpp"

#include "runtime/chat/chat_render.hpp"
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
  session_text_.clear();
  pending_token_ = -1;
  reprocessed_ = false;
}

GenerateResult Chat::turn(const std::string& user, const GenerateOptions& o,
                          const std::function<void(const chat::ChatDelta&)>& on_delta) {
  const Tokenizer& tok = s_.model().tokenizer();
  nlohmann::ordered_json body = {{"messages", messages_}};
  body["messages"].push_back({{"role", "user"}, {"content", user}});
  const chat::ChatRequest req = chat::parse_chat_request(body, format_.defaults);
  const std::string prompt = chat::render_chat(*format_.tmpl, req.inputs);

  // What the session holds is kept when the rendering still starts with it (llama-cli's
  // common_chat_format_single: only the new text is evaluated).
  const bool keep = s_.n_past() > 0 && prompt.starts_with(session_text_);
  std::vector<int32_t> tokens;
  if (keep && pending_token_ >= 0) tokens.push_back(pending_token_);
  const std::string_view fresh =
      keep ? std::string_view(prompt).substr(session_text_.size()) : std::string_view(prompt);
  const auto body_tokens = tok.encode(fresh, /*add_bos=*/!keep, /*parse_special=*/true);
  tokens.insert(tokens.end(), body_tokens.begin(), body_tokens.end());
  const int64_t held = keep ? s_.n_past() : 0;
  if (held + static_cast<int64_t>(tokens.size()) >= s_.n_ctx())
    fail(ErrorKind::context,
         "context full: the conversation needs {} tokens, the context is {} (/reset to start "
         "over, or a larger -c)",
         held + static_cast<int64_t>(tokens.size()), s_.n_ctx());
  reprocessed_ = !keep && s_.n_past() > 0;
  if (!keep) s_.reset();

  chat::ChatOutputParser parser(chat::chat_parse_options(req, prompt));
  TextStream text(tok, /*render_special=*/true);  // the end-of-turn token's text too
  std::string reply;
  GenerateResult r = generate(s_, sampler_, tokens, o, [&](int32_t id) {
    const std::string piece = text.push(id);
    reply += piece;
    // The end-of-turn token closes the message; it is not the reply's text.
    if (!tok.is_eog(id)) on_delta(parser.feed(piece));
  });
  reply += text.flush();
  const chat::ChatDelta rest = parser.finish();
  if (!rest.empty()) on_delta(rest);

  // The session now holds the prompt and the reply (its last token pending when not evaluated).
  session_text_ = prompt + reply;
  pending_token_ = !r.tokens.empty() && !r.last_evaluated ? r.tokens.back() : -1;
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
