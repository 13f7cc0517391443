#pragma once
// The JSON bodies of the OpenAI endpoints: whole responses, stream chunks, usage, logprobs, and
// llama-server's `timings` object.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/chat/chat_output.hpp"
#include "runtime/server/job.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::server {

struct ReplyMeta {
  Api api = Api::chat;
  std::string id;  // chatcmpl-… / cmpl-…
  int64_t created = 0;
  std::string model;
  // chat: how the reply is split into reasoning, content and tool calls, and whether a call is
  // required (tool_choice "required": a reply without one fails the request).
  chat::ChatParseOptions parse;
  bool call_required = false;
};

nlohmann::json timings_json(const ReplyStats& s);
nlohmann::json usage_json(const ReplyStats& s);
// chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completion: the legacy
// {tokens, token_logprobs, top_logprobs, text_offset} (offsets from text_offset0).
nlohmann::json logprobs_json(Api api, const Tokenizer& tok, const std::vector<TokenLogprob>& lp,
                             size_t text_offset0);

// A whole (non-streamed) response; chat: `message` is the parsed assistant message
// (chat::ChatMessage::to_json), completions: `text`.
nlohmann::json full_response(const ReplyMeta& m, const std::string& text,
                             const std::string& finish_reason, const ReplyStats& s,
                             const nlohmann::json& logprobs,
                             const nlohmann::json& message = nullptr);
// chat: "tool_calls" when the reply made calls and ended by itself (llama-server's reason).
std::string chat_finish_reason(const chat::ChatMessage& msg, const std::string& finish_reason);
// Stream chunks: the first (role), a text delta, the last (finish_reason, timings), the usage one.
nlohmann::json role_chunk(const ReplyMeta& m);
nlohmann::json delta_chunk(const ReplyMeta& m, const std::string& text,
                           const nlohmann::json& logprobs);
// chat: a parsed delta (chat::delta_to_json: reasoning_content, content, tool_calls).
nlohmann::json chat_delta_chunk(const ReplyMeta& m, const nlohmann::json& delta,
                                const nlohmann::json& logprobs);
nlohmann::json final_chunk(const ReplyMeta& m, const std::string& finish_reason,
                           const ReplyStats& s);
nlohmann::json usage_chunk(const ReplyMeta& m, const ReplyStats& s);

// llama-server's /completion: a stream chunk ({"content", "stop": false}) and the last chunk or
// whole response ({"content", "stop": true, stop_type, tokens_predicted, timings, ...}).
nlohmann::json native_chunk(const std::string& text, const nlohmann::json& probs);
nlohmann::json native_final(const ReplyMeta& m, const std::string& text, const Event& done,
                            const nlohmann::json& probs);

// JSON text that never throws on invalid UTF-8 (a token's bytes can be a partial character).
std::string dump(const nlohmann::json& j);

}  // namespace ferry::server
