#pragma once
// The model's output text -> an OpenAI assistant message: reasoning split from content
// (<think>...</think>, llama-server's --reasoning-format deepseek / none) and tool calls parsed
// (Qwen3's Hermes form <tool_call>{"name":..., "arguments":{...}}</tool_call> and the
// Qwen3.5/Qwen3-Coder XML form <tool_call><function=NAME><parameter=P>VALUE</parameter>...
// </function></tool_call>, parameter values typed by the tool's JSON schema as llama.cpp's
// Qwen3-Coder parser types them).
//
// Streaming: ChatOutputParser takes the text in pieces of any size (a tag may be split across
// pieces) and returns deltas; the deltas of a stream add up to the one-shot parse of the whole
// text. Text that could be the start of a tag is held back until it is decided. Malformed output (a
// <tool_call> block that does not parse, names an unknown tool, lacks a required parameter, or
// never closes) is returned as content, never an error.
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::chat {

enum class ReasoningFormat {
  none,      // everything stays in content, <think> tags included
  deepseek,  // <think>...</think> at the start of the output goes to reasoning_content
};
// "none" | "deepseek" | "auto" (llama-server's default, the deepseek split here); else invalid_arg.
ReasoningFormat parse_reasoning_format(std::string_view name);

// OpenAI tool_choice. none: the tools are still rendered into the prompt (the model sees them) but
// the output is not parsed for calls; auto: parsed; required: parsed, and the caller should treat
// an answer without a call as a failure of the request (Ferry has no grammar to force one).
enum class ToolChoice { none, auto_, required };
// "none" | "auto" | "required"; a missing/null value is auto. Anything else (including the
// {"type":"function",...} object form) is an ErrorKind::invalid_arg error.
ToolChoice parse_tool_choice(const nlohmann::ordered_json& value);
inline bool tool_choice_parses_calls(ToolChoice c) {
  return c != ToolChoice::none;
}

// True when the rendered prompt ends inside an opened <think> block (Qwen3.5 with thinking on,
// QwQ, DeepSeek-R1: the template's generation prompt ends with "<think>\n"): the output then
// starts in the reasoning. Set ChatParseOptions::starts_in_reasoning from it.
bool prompt_opens_reasoning(std::string_view prompt);

struct ChatParseOptions {
  ReasoningFormat reasoning_format = ReasoningFormat::deepseek;
  bool starts_in_reasoning = false;
  bool parse_tool_calls = false;  // tools given and tool_choice != none
  // The request's tools (OpenAI array): names a call may use and the parameter schemas that type
  // XML parameter values. Empty: any name, XML values typed as "any JSON, else string".
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  // Qwen3.5 may open <tool_call> without closing </think> (llama.cpp's Qwen3-Coder parser ends the
  // reasoning there too).
  bool tool_call_ends_reasoning = true;
  // Tool-call ids; default: "call_" + 24 random alphanumerics (llama-server uses random ids too).
  std::function<std::string(size_t index)> make_id;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as compact text (OpenAI's function.arguments)
};

// One streamed tool-call update, as llama-server sends them: the first for a call carries its
// id and name (arguments ""), the following ones argument text to append.
struct ToolCallDelta {
  size_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

struct ChatMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  // {"role":"assistant","content":...,"reasoning_content":... (when not empty),"tool_calls":[...]
  // (when any)}; content is null when empty and there are tool calls (as llama-server).
  nlohmann::ordered_json to_json() const;
};

// A streamed chunk's "delta" object: reasoning_content/content when not empty, tool_calls as
// [{"index","id","type":"function","function":{"name","arguments"}}] (id/type/name only on a
// call's first delta).
nlohmann::ordered_json delta_to_json(const ChatDelta& d);

class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatParseOptions opts);
  ~ChatOutputParser();
  ChatOutputParser(ChatOutputParser&&) noexcept;
  ChatOutputParser& operator=(ChatOutputParser&&) noexcept;

  ChatDelta feed(std::string_view piece);
  ChatDelta finish();  // end of generation: held-back text is decided (unclosed tags are content)
  const ChatMessage& message() const { return message_; }  // all deltas so far, accumulated

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ChatMessage message_;
  void accumulate(const ChatDelta& d);
};

// One-shot: the whole output at once (feed + finish).
ChatMessage parse_chat_output(std::string_view text, ChatParseOptions opts);

}  // namespace ferry::chat
