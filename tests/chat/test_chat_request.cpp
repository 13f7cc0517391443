// An OpenAI request through the whole library, as the server will drive it: body -> prompt ->
// (a given model output, streamed) -> assistant message with reasoning and tool calls -> the next
// turn's prompt with the call and its result.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/chat/chat_request.hpp"

using namespace ferry::chat;
using json = nlohmann::ordered_json;

namespace {

Template load(const std::string& name) {
  std::ifstream f(std::string(FERRY_SOURCE_DIR) + "/tests/data/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return Template(ss.str());
}

const char* kBody = R"({
  "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo for 3 days?"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}],
  "tool_choice": "auto"})";

}  // namespace

TEST(ChatRequest, AgentRoundTripThroughTheLibrary) {
  Template t = load("Qwen3.5-4B.jinja");
  ChatRequest req = parse_chat_request(json::parse(kBody), ChatServerDefaults{});
  std::string prompt = render_chat(t, req.inputs);
  ASSERT_TRUE(prompt.ends_with("<|im_start|>assistant\n<think>\n"));
  ChatParseOptions o = chat_parse_options(req, prompt);
  EXPECT_TRUE(o.starts_in_reasoning);
  EXPECT_TRUE(o.parse_tool_calls);
  o.make_id = [](size_t i) { return "call_" + std::to_string(i); };

  const std::string output =
      "The user wants "
      "Oslo.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</"
      "parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  ChatOutputParser parser(o);
  json deltas = json::array();
  for (size_t at = 0; at < output.size(); at += 5) {
    ChatDelta d = parser.feed(std::string_view(output).substr(at, 5));
    if (!d.empty()) deltas.push_back(delta_to_json(d));
  }
  ChatDelta last = parser.finish();
  if (!last.empty()) deltas.push_back(delta_to_json(last));
  json msg = parser.message().to_json();
  EXPECT_EQ(msg["reasoning_content"], "The user wants Oslo.");
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo","days":3})");
  // The stream: reasoning deltas, then the call's name, then its arguments.
  ASSERT_GE(deltas.size(), 2u);
  EXPECT_TRUE(deltas.front().contains("reasoning_content"));
  EXPECT_EQ(deltas.back()["tool_calls"][0]["function"]["name"], "get_weather");

  // Next turn: the assistant message and the tool's result go back in.
  json body = json::parse(kBody);
  body["messages"].push_back(msg);
  body["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "{\"temp\": -3}"}});
  std::string next = render_chat(t, parse_chat_request(body, ChatServerDefaults{}).inputs);
  EXPECT_NE(
      next.find(
          "<|im_start|>assistant\n<think>\nThe user wants Oslo.\n</think>\n\n<tool_call>\n"
          "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n"
          "</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
          "{\"temp\": -3}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"),
      std::string::npos)
      << next;
}

TEST(ChatRequest, OptionsAndErrors) {
  ChatServerDefaults defaults;
  defaults.reasoning_budget = 0;
  defaults.chat_template_kwargs = {{"custom", 1}};
  ChatRequest r = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "chat_template_kwargs": {"custom": 2}, "reasoning_format": "none", "tool_choice": "none"})"),
                                     defaults);
  EXPECT_EQ(r.inputs.enable_thinking, false);
  EXPECT_EQ(r.inputs.chat_template_kwargs["custom"], 2);
  EXPECT_EQ(r.reasoning_format, ReasoningFormat::none);
  EXPECT_EQ(r.tool_choice, ToolChoice::none);
  std::string prompt = render_chat(load("Qwen3.5-4B.jinja"), r.inputs);
  EXPECT_TRUE(prompt.ends_with("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(chat_parse_options(r, prompt).starts_in_reasoning);

  const char* bad[] = {
      R"([])",
      R"({"tools": []})",
      R"({"messages": {}})",
      R"({"messages": [], "tools": [{"type": "function"}]})",
      R"({"messages": [], "tool_choice": "maybe"})",
      R"({"messages": [], "chat_template_kwargs": {"enable_thinking": "false"}})",
      R"({"messages": [], "reasoning_format": "xml"})",
      R"({"messages": [], "parallel_tool_calls": "yes"})",
  };
  for (const char* b : bad) {
    try {
      parse_chat_request(json::parse(b), ChatServerDefaults{});
      ADD_FAILURE() << b;
    } catch (const ferry::Error& e) {
      EXPECT_EQ(e.kind(), ferry::ErrorKind::invalid_arg) << b;
    }
  }
}
