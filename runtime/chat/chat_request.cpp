#include "runtime/chat/chat_request.hpp"

#include "runtime/core/error.hpp"

namespace ferry::chat {

using json = nlohmann::ordered_json;

ChatRequest parse_chat_request(const json& body, const ChatServerDefaults& defaults) {
  if (!body.is_object()) fail(ErrorKind::invalid_arg, "the request body must be a JSON object");
  ChatRequest r;
  if (!body.contains("messages")) fail(ErrorKind::invalid_arg, "'messages' is required");
  r.inputs.messages = body["messages"];
  if (!r.inputs.messages.is_array()) fail(ErrorKind::invalid_arg, "'messages' must be an array");
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) fail(ErrorKind::invalid_arg, "'tools' must be an array");
    for (size_t k = 0; k < body["tools"].size(); ++k) {
      const json& t = body["tools"][k];
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        fail(ErrorKind::invalid_arg,
             "tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", k);
    }
    r.inputs.tools = body["tools"];
  }
  r.tool_choice = parse_tool_choice(body.contains("tool_choice") ? body["tool_choice"] : json());
  if (body.contains("parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean())
      fail(ErrorKind::invalid_arg, "'parallel_tool_calls' must be a boolean");
    r.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  }
  r.reasoning_format = defaults.reasoning_format;
  if (body.contains("reasoning_format")) {
    if (!body["reasoning_format"].is_string())
      fail(ErrorKind::invalid_arg, "'reasoning_format' must be a string");
    r.reasoning_format = parse_reasoning_format(body["reasoning_format"].get<std::string>());
  }
  if (body.contains("add_generation_prompt")) {
    if (!body["add_generation_prompt"].is_boolean())
      fail(ErrorKind::invalid_arg, "'add_generation_prompt' must be a boolean");
    r.inputs.add_generation_prompt = body["add_generation_prompt"].get<bool>();
  }
  json kwargs =
      defaults.chat_template_kwargs.is_object() ? defaults.chat_template_kwargs : json::object();
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object())
      fail(ErrorKind::invalid_arg, "'chat_template_kwargs' must be an object");
    for (auto it = body["chat_template_kwargs"].begin(); it != body["chat_template_kwargs"].end();
         ++it)
      kwargs[it.key()] = it.value();
  }
  if (kwargs.contains("enable_thinking") && !kwargs["enable_thinking"].is_boolean())
    fail(ErrorKind::invalid_arg, "invalid type for \"enable_thinking\" (expected boolean, got {})",
         kwargs["enable_thinking"].type_name());
  r.inputs.chat_template_kwargs = std::move(kwargs);
  r.inputs.enable_thinking = defaults.reasoning_budget != 0;
  r.inputs.bos_token = defaults.bos_token;
  r.inputs.eos_token = defaults.eos_token;
  return r;
}

ChatParseOptions chat_parse_options(const ChatRequest& request,
                                    const std::string& rendered_prompt) {
  ChatParseOptions o;
  o.reasoning_format = request.reasoning_format;
  o.starts_in_reasoning =
      request.reasoning_format != ReasoningFormat::none && prompt_opens_reasoning(rendered_prompt);
  const bool has_tools = request.inputs.tools.is_array() && !request.inputs.tools.empty();
  o.parse_tool_calls = has_tools && tool_choice_parses_calls(request.tool_choice);
  if (has_tools) o.tools = request.inputs.tools;
  return o;
}

}  // namespace ferry::chat
