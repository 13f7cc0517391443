#pragma once
// The chat renderer: an OpenAI-style request (messages, tools, chat_template_kwargs) through a
// model's chat template into the prompt text, with the normalisation llama-server applies first.
//
// Errors (all ferry::Error; the server maps them to HTTP statuses):
//   invalid_arg  a malformed request: messages not an array, a message without a role, a content
//                part that is not text, tool-call arguments that are not valid JSON
//   TemplateError the template raised (raise_exception, a jinja2 runtime error) or uses a construct
//                the interpreter lacks (kind unsupported, the message names the template line)
//   unsupported  tools were given and the template renders the same prompt without them: the
//                request cannot be rendered faithfully (never a silent drop of the tools)
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/chat/template.hpp"

namespace ferry::chat {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI messages
  nlohmann::ordered_json tools;  // OpenAI tools array; null or [] = no tools
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // Extra template variables (the request's chat_template_kwargs, e.g. {"enable_thinking": false}).
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  // llama-server always passes enable_thinking (true unless --reasoning-budget 0 or the request
  // says otherwise); set here when chat_template_kwargs does not hold it. nullopt: not passed.
  std::optional<bool> enable_thinking;
  std::optional<std::time_t> now;  // strftime_now's time (UTC); default: the clock
};

// llama-server's request normalisation, before the template sees the messages:
// - role "developer" becomes "system";
// - content given as an array of parts (only {"type": "text", "text": ...} is accepted): kept as
//   the array when the template takes typed content (keep_text_parts), else the texts joined with
//   "\n" (llama-server's concat_content_parts for templates that only take strings);
// - tool_calls[].function.arguments given as a JSON string is parsed to an object.
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages,
                                          bool keep_text_parts = false);

// Whether the template renders content given as text parts (Qwen3.5's render_content does):
// a probe message whose content is [{"type": "text", "text": MARKER}] renders without error and
// shows MARKER itself, not the part's Python repr. llama-server decides the same question from
// which operations the template applies to the content (common/jinja/caps.cpp); the probe agrees
// with it on the committed templates.
bool template_takes_typed_content(const Template& tmpl);

// The template context render_chat uses (messages normalised, tools only when non-empty,
// add_generation_prompt, bos_token, eos_token, then enable_thinking and chat_template_kwargs).
nlohmann::ordered_json chat_context(const ChatTemplateInputs& in, bool keep_text_parts = false);

// Renders the prompt. Throws as listed above.
std::string render_chat(const Template& tmpl, const ChatTemplateInputs& in);

}  // namespace ferry::chat
