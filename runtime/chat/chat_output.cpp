#include "runtime/chat/chat_output.hpp"

#include <random>

#include "runtime/chat/output_split.hpp"
#include "runtime/core/error.hpp"

namespace ferry::chat {

using json = nlohmann::ordered_json;

ReasoningFormat parse_reasoning_format(std::string_view name) {
  if (name == "none") return ReasoningFormat::none;
  if (name == "deepseek" || name == "auto") return ReasoningFormat::deepseek;
  fail(ErrorKind::invalid_arg, "unknown reasoning format '{}' (none, deepseek, auto)", name);
}

ToolChoice parse_tool_choice(const json& value) {
  if (value.is_null()) return ToolChoice::auto_;
  if (value.is_string()) {
    const auto s = value.get<std::string>();
    if (s == "none") return ToolChoice::none;
    if (s == "auto") return ToolChoice::auto_;
    if (s == "required") return ToolChoice::required;
  }
  fail(ErrorKind::invalid_arg, "invalid tool_choice {} (\"none\", \"auto\" or \"required\")",
       value.dump());
}

bool prompt_opens_reasoning(std::string_view prompt) {
  size_t open = prompt.rfind("<think>");
  if (open == std::string_view::npos) return false;
  return prompt.find("</think>", open) == std::string_view::npos;
}

json ChatMessage::to_json() const {
  json m = {{"role", "assistant"}};
  m["content"] = content.empty() && !tool_calls.empty() ? json(nullptr) : json(content);
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : tool_calls)
      calls.push_back({{"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}},
                       {"id", c.id}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

json delta_to_json(const ChatDelta& d) {
  json out = json::object();
  if (!d.reasoning_content.empty()) out["reasoning_content"] = d.reasoning_content;
  if (!d.content.empty()) out["content"] = d.content;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : d.tool_calls) {
      json j = {{"index", c.index}};
      if (!c.id.empty()) {
        j["id"] = c.id;
        j["type"] = "function";
        j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
      } else {
        j["function"] = {{"arguments", c.arguments}};
      }
      calls.push_back(std::move(j));
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

namespace {
std::string random_call_id(size_t) {
  static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int k = 0; k < 24; ++k) id += alnum[rng() % (sizeof alnum - 1)];
  return id;
}
}  // namespace

struct ChatOutputParser::Impl {
  ChatParseOptions opts;
  ReasoningSplitter reasoning;
  ToolCallSplitter tools;
  std::vector<ToolCall> calls;
  explicit Impl(ChatParseOptions o)
      : opts(std::move(o)),
        reasoning(opts.reasoning_format, opts.starts_in_reasoning,
                  opts.tool_call_ends_reasoning && opts.parse_tool_calls),
        tools(opts) {
    if (!opts.make_id) opts.make_id = random_call_id;
  }
};

ChatOutputParser::ChatOutputParser(ChatParseOptions opts)
    : impl_(std::make_unique<Impl>(std::move(opts))) {}
ChatOutputParser::~ChatOutputParser() = default;
ChatOutputParser::ChatOutputParser(ChatOutputParser&&) noexcept = default;
ChatOutputParser& ChatOutputParser::operator=(ChatOutputParser&&) noexcept = default;

ChatDelta ChatOutputParser::feed(std::string_view piece) {
  ChatDelta d;
  std::string content;
  impl_->reasoning.feed(piece, d.reasoning_content, content);
  if (impl_->opts.parse_tool_calls)
    impl_->tools.feed(content, d, impl_->calls);
  else
    d.content = std::move(content);
  accumulate(d);
  return d;
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta d;
  std::string content;
  impl_->reasoning.finish(d.reasoning_content, content);
  if (impl_->opts.parse_tool_calls) {
    impl_->tools.feed(content, d, impl_->calls);
    impl_->tools.finish(d, impl_->calls);
  } else {
    d.content = std::move(content);
  }
  accumulate(d);
  return d;
}

void ChatOutputParser::accumulate(const ChatDelta& d) {
  message_.reasoning_content += d.reasoning_content;
  message_.content += d.content;
  for (const auto& c : d.tool_calls) {
    if (!c.id.empty())
      message_.tool_calls.push_back({c.id, c.name, ""});
    else
      message_.tool_calls[c.index].arguments += c.arguments;
  }
}

ChatMessage parse_chat_output(std::string_view text, ChatParseOptions opts) {
  ChatOutputParser p(std::move(opts));
  p.feed(text);
  p.finish();
  return p.message();
}

}  // namespace ferry::chat
