#pragma once
// The glue between an OpenAI /v1/chat/completions body and this library, as llama-server reads
// one: what to render (ChatTemplateInputs), how to parse the output (ChatParseOptions). The server
// and `ferry chat` call these two; every field error is an ErrorKind::invalid_arg naming the field.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/chat/chat_output.hpp"
#include "runtime/chat/chat_render.hpp"

namespace ferry::chat {

// Server-wide defaults (llama-server's flags of the same meaning).
struct ChatServerDefaults {
  ReasoningFormat reasoning_format = ReasoningFormat::deepseek;  // --reasoning-format (auto)
  int reasoning_budget =
      -1;  // --reasoning-budget: 0 renders with enable_thinking=false, -1 unlimited
  nlohmann::ordered_json chat_template_kwargs =
      nlohmann::ordered_json::object();  // --chat-template-kwargs
  std::string bos_token;  // the vocabulary's BOS/EOS texts, for templates that print them
  std::string eos_token;
};

struct ChatRequest {
  ChatTemplateInputs inputs;  // render_chat(template, inputs)
  ToolChoice tool_choice = ToolChoice::auto_;
  ReasoningFormat reasoning_format = ReasoningFormat::deepseek;
  bool parallel_tool_calls = true;  // as sent; calls are parsed either way
};

// Reads messages, tools, tool_choice, parallel_tool_calls, chat_template_kwargs (merged over the
// defaults, the request's keys win), reasoning_format and add_generation_prompt from the body.
// enable_thinking: false when reasoning_budget is 0, else true, unless chat_template_kwargs says
// otherwise (it must then be a boolean, as llama-server requires).
ChatRequest parse_chat_request(const nlohmann::ordered_json& body,
                               const ChatServerDefaults& defaults);

// How to parse the reply to `request`, given the prompt render_chat produced: the output starts in
// the reasoning when the prompt opened <think>; tool calls are parsed when tools were given and
// tool_choice is not none.
ChatParseOptions chat_parse_options(const ChatRequest& request, const std::string& rendered_prompt);

}  // namespace ferry::chat
