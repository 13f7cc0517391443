#include "runtime/chat/chat_render.hpp"

namespace ferry::chat {

using json = nlohmann::ordered_json;

json normalize_messages(const json& messages, bool keep_text_parts) {
  if (!messages.is_array())
    fail(ErrorKind::invalid_arg, "'messages' must be an array, got {}", messages.type_name());
  json out = json::array();
  for (size_t k = 0; k < messages.size(); ++k) {
    json msg = messages[k];
    if (!msg.is_object()) fail(ErrorKind::invalid_arg, "messages[{}] must be an object", k);
    if (!msg.contains("role") || !msg["role"].is_string())
      fail(ErrorKind::invalid_arg, "messages[{}] has no 'role' string", k);
    if (msg["role"] == "developer") msg["role"] = "system";
    if (msg.contains("content") && msg["content"].is_array()) {
      std::string text;
      for (const auto& part : msg["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          fail(ErrorKind::invalid_arg,
               "messages[{}].content: only parts {{\"type\": \"text\", \"text\": ...}} are "
               "supported, got {}",
               k, part.dump());
        if (!text.empty()) text += '\n';
        text += part["text"].get<std::string>();
      }
      if (!keep_text_parts) msg["content"] = text;
    } else if (msg.contains("content") && !msg["content"].is_string() &&
               !msg["content"].is_null()) {
      fail(ErrorKind::invalid_arg,
           "messages[{}].content must be a string, an array of text parts or null", k);
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (size_t c = 0; c < msg["tool_calls"].size(); ++c) {
        json& call = msg["tool_calls"][c];
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
          continue;
        json& fn = call["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          try {
            fn["arguments"] = json::parse(fn["arguments"].get<std::string>());
          } catch (const json::parse_error& e) {
            fail(ErrorKind::invalid_arg,
                 "messages[{}].tool_calls[{}].function.arguments is not valid JSON: {}", k, c,
                 e.what());
          }
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

bool template_takes_typed_content(const Template& tmpl) {
  static const std::string marker = "FERRY_TYPED_CONTENT_PROBE";
  json ctx = {{"messages",
               json::array({{{"role", "user"},
                             {"content", json::array({{{"type", "text"}, {"text", marker}}})}}})},
              {"add_generation_prompt", false},
              {"bos_token", ""},
              {"eos_token", ""}};
  try {
    std::string out = tmpl.render(ctx, 0);
    return out.find(marker) != std::string::npos &&
           out.find("'text': '" + marker) == std::string::npos;
  } catch (const TemplateError&) {
    return false;
  }
}

json chat_context(const ChatTemplateInputs& in, bool keep_text_parts) {
  json ctx = json::object();
  ctx["messages"] = normalize_messages(in.messages, keep_text_parts);
  if (in.tools.is_array() && !in.tools.empty())
    ctx["tools"] = in.tools;
  else if (!in.tools.is_null() && !in.tools.is_array())
    fail(ErrorKind::invalid_arg, "'tools' must be an array");
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  ctx["bos_token"] = in.bos_token;
  ctx["eos_token"] = in.eos_token;
  if (in.enable_thinking && !in.chat_template_kwargs.contains("enable_thinking"))
    ctx["enable_thinking"] = *in.enable_thinking;
  if (!in.chat_template_kwargs.is_null() && !in.chat_template_kwargs.is_object())
    fail(ErrorKind::invalid_arg, "'chat_template_kwargs' must be an object");
  if (in.chat_template_kwargs.is_object())
    for (auto it = in.chat_template_kwargs.begin(); it != in.chat_template_kwargs.end(); ++it)
      ctx[it.key()] = it.value();
  return ctx;
}

std::string render_chat(const Template& tmpl, const ChatTemplateInputs& in) {
  const std::time_t now = in.now ? *in.now : std::time(nullptr);
  bool has_parts = false;
  if (in.messages.is_array())
    for (const auto& m : in.messages)
      has_parts = has_parts || (m.is_object() && m.contains("content") && m["content"].is_array());
  json ctx = chat_context(in, has_parts && template_takes_typed_content(tmpl));
  std::string prompt = tmpl.render(ctx, now);
  if (ctx.contains("tools")) {
    // A template that renders the same prompt without the tools ignores them: the model would never
    // see the tool list, so the request is refused rather than answered as if tools were offered.
    json bare = ctx;
    bare.erase("tools");
    std::string without;
    try {
      without = tmpl.render(bare, now);
    } catch (const TemplateError&) {
      return prompt;  // differs from the tools rendering by raising: the tools matter
    }
    if (without == prompt)
      fail(ErrorKind::unsupported,
           "the chat template does not render 'tools' (the prompt is the same without them)");
  }
  return prompt;
}

}  // namespace ferry::chat
