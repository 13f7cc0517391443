#pragma once
// The two incremental splitters ChatOutputParser chains (internal to runtime/chat): reasoning vs
// content, then content vs tool calls. Both hold back text that may still become a tag, and the
// whitespace that a following tag would drop.
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/chat_output.hpp"

namespace ferry::chat {

// The length of the longest suffix of `buf` that is a proper prefix of one of `tags`.
size_t partial_tag_suffix(std::string_view buf, const std::vector<std::string>& tags);
bool is_json_space(char c);

// Trailing whitespace is held back (`held`) until non-space text follows, so that whitespace before
// a closing tag can be dropped without ever having been sent.
struct HeldSpace {
  std::string held;
  void emit(std::string_view s, std::string& out);
  void drop() { held.clear(); }
  void flush(std::string& out) {
    out += held;
    held.clear();
  }
};

class ReasoningSplitter {
 public:
  ReasoningSplitter(ReasoningFormat fmt, bool starts_in_reasoning, bool tool_call_ends_reasoning);
  void feed(std::string_view piece, std::string& reasoning, std::string& content);
  void finish(std::string& reasoning, std::string& content);

 private:
  enum class State { start, reasoning, content };
  void step(std::string& reasoning, std::string& content);
  ReasoningFormat fmt_;
  State state_;
  std::vector<std::string> end_tags_;
  std::string buf_;
  bool skip_space_ = false;  // drop leading whitespace (after <think> or </think>)
  HeldSpace reasoning_space_;
};

class ToolCallSplitter {
 public:
  explicit ToolCallSplitter(const ChatParseOptions& opts) : opts_(opts) {}
  void feed(std::string_view content_piece, ChatDelta& out, std::vector<ToolCall>& calls);
  void finish(ChatDelta& out, std::vector<ToolCall>& calls);

 private:
  void step(ChatDelta& out, std::vector<ToolCall>& calls);
  const ChatParseOptions& opts_;
  bool in_call_ = false;
  bool skip_space_ = false;  // whitespace between calls is not content
  std::string buf_;
  HeldSpace content_space_;
};

// Parses the body of one <tool_call> block (between the tags) into a call, or returns false.
// arg_pieces: the arguments text in the pieces it is streamed as (they concatenate to arguments).
bool parse_tool_call_body(std::string_view body, const nlohmann::ordered_json& tools,
                          ToolCall& call, std::vector<std::string>& arg_pieces);

}  // namespace ferry::chat
