#pragma once
// The generation requests of the OpenAI API, parsed and checked: /v1/chat/completions and
// /v1/completions bodies become one GenRequest. Unknown fields are ignored (clients send many);
// every known field of the wrong type or out of range is a 400 that names it.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/chat/chat_request.hpp"
#include "runtime/sampling/sampler.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::server {

// chat: /v1/chat/completions; completion: /v1/completions; native: llama-server's /completion.
enum class Api { chat, completion, native };

struct GenRequest {
  Api api = Api::chat;
  std::vector<ChatMessage>
      messages;  // chat: roles system / user / assistant / tool ("developer" → system), checked
  chat::ChatRequest chat;   // chat: what the template renders and how the reply is parsed
  std::string prompt_text;  // completion: the prompt as text ...
  std::vector<int32_t> prompt_tokens;  // ... or as token ids (then prompt_text is empty)
  bool prompt_is_tokens = false;
  SamplingParams sampling;
  int32_t max_tokens = -1;  // -1: the server's -n (until end of generation or a full context)
  std::vector<std::string> stop;
  bool stream = false;
  bool cache_prompt = true;  // llama-server's: reuse what the slot holds (false: start over)
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int32_t top_logprobs = 0;  // alternatives per token (0..20)
  // logit_bias: added to a token's logit before sampling; -infinity bans it (OpenAI's -100,
  // llama-server's false). Ids are checked against the vocabulary when the prompt is.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::string model;  // as sent (echoed back when given)
};

// Server-side defaults a request starts from (the serve command's sampling flags).
struct RequestDefaults {
  SamplingParams sampling;
  int32_t n_predict = -1;  // -n: the cap on max_tokens (-1: none)
};

// ApiError 400 (invalid_request_error) naming the field on any problem.
// chat: `ordered` is the same body parsed with its key order kept (tools' JSON schemas reach the
// template in the client's order, as llama-server keeps it); `chat_defaults` the server's
// --reasoning-format, --reasoning-budget, --chat-template-kwargs and BOS/EOS texts.
GenRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                              const RequestDefaults& d,
                              const chat::ChatServerDefaults& chat_defaults);
GenRequest parse_completion_request(const nlohmann::json& body, const RequestDefaults& d);
// llama-server's /completion: the completion fields plus `n_probs` (alternatives per token).
GenRequest parse_native_request(const nlohmann::json& body, const RequestDefaults& d);
// The `messages` array alone, checked (also /apply-template).
std::vector<ChatMessage> parse_messages(const nlohmann::json& body);
// The body as a JSON object, or ApiError 400 "malformed JSON" / "must be a JSON object".
nlohmann::json parse_body(const std::string& text);
// The chat library's reading of a chat body (tools, tool_choice, chat_template_kwargs, ...); its
// errors become ApiError 400 with the library's message, which names the field.
chat::ChatRequest parse_chat_fields(const nlohmann::ordered_json& ordered,
                                    const chat::ChatServerDefaults& chat_defaults);

}  // namespace ferry::server
