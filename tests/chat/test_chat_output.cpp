// The output parsers: reasoning split, Hermes and XML tool calls typed by the schema, malformed
// output as content, and streaming in random piece sizes equal to the one-shot parse.
#include <gtest/gtest.h>

#include <random>

#include "runtime/chat/chat_output.hpp"
#include "runtime/core/error.hpp"

using namespace ferry::chat;
using json = nlohmann::ordered_json;

namespace {

json tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["location"]}}},
    {"type": "function", "function": {"name": "configure", "parameters": {"type": "object",
      "properties": {"code": {"type": "string"}, "ratio": {"type": "number"}, "on": {"type": "boolean"},
                     "opts": {"type": "object"}, "list": {"type": "array"}, "maybe": {"type": ["array", "null"]},
                     "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                     "mode": {"enum": ["fast", "slow"]}, "free": {}}}}}
  ])");
}

ChatParseOptions opts(bool tools_on = true, bool in_reasoning = false) {
  ChatParseOptions o;
  o.parse_tool_calls = tools_on;
  o.tools = tools();
  o.starts_in_reasoning = in_reasoning;
  o.make_id = [](size_t i) { return "call_" + std::to_string(i); };
  return o;
}

// Feeds `text` in random pieces; checks the accumulated deltas equal the one-shot parse and that
// each call's deltas come as llama-server sends them (id and name first, then arguments).
void expect_streaming_matches(const std::string& text, const ChatParseOptions& o,
                              std::mt19937& rng) {
  ChatMessage one = parse_chat_output(text, o);
  ChatOutputParser p(o);
  ChatMessage acc;
  auto take = [&](const ChatDelta& d) {
    acc.reasoning_content += d.reasoning_content;
    acc.content += d.content;
    for (const auto& c : d.tool_calls) {
      if (!c.id.empty()) {
        ASSERT_EQ(c.index, acc.tool_calls.size());
        EXPECT_FALSE(c.name.empty());
        EXPECT_EQ(c.arguments, "");
        acc.tool_calls.push_back({c.id, c.name, ""});
      } else {
        ASSERT_LT(c.index, acc.tool_calls.size());
        acc.tool_calls[c.index].arguments += c.arguments;
      }
    }
  };
  for (size_t at = 0; at < text.size();) {
    size_t n = 1 + rng() % 9;
    take(p.feed(std::string_view(text).substr(at, n)));
    at += n;
    if (rng() % 4 == 0) p = ChatOutputParser(std::move(p));  // a server moves parsers between slots
  }
  take(p.finish());
  EXPECT_EQ(acc.reasoning_content, one.reasoning_content) << text;
  EXPECT_EQ(acc.content, one.content) << text;
  ASSERT_EQ(acc.tool_calls.size(), one.tool_calls.size()) << text;
  for (size_t k = 0; k < one.tool_calls.size(); ++k) {
    EXPECT_EQ(acc.tool_calls[k].name, one.tool_calls[k].name);
    EXPECT_EQ(acc.tool_calls[k].arguments, one.tool_calls[k].arguments);
  }
  EXPECT_EQ(p.message().to_json(), one.to_json());
}

}  // namespace

TEST(ChatOutput, ReasoningSplit) {
  ChatParseOptions o = opts(false);
  ChatMessage m = parse_chat_output("<think>\nLet me think.\n</think>\n\nHello!", o);
  EXPECT_EQ(m.reasoning_content, "Let me think.");
  EXPECT_EQ(m.content, "Hello!");
  m = parse_chat_output("  Plain answer\n", o);
  EXPECT_EQ(m.reasoning_content, "");
  EXPECT_EQ(m.content, "  Plain answer\n");
  m = parse_chat_output("<think>never closed", o);
  EXPECT_EQ(m.reasoning_content, "never closed");
  EXPECT_EQ(m.content, "");
  m = parse_chat_output("Answer <think>not at the start</think>", o);
  EXPECT_EQ(m.content, "Answer <think>not at the start</think>");
  o.reasoning_format = ReasoningFormat::none;
  m = parse_chat_output("<think>\nx\n</think>\n\nHello", o);
  EXPECT_EQ(m.reasoning_content, "");
  EXPECT_EQ(m.content, "<think>\nx\n</think>\n\nHello");
}

TEST(ChatOutput, StartsInsideReasoningWhenThePromptOpenedIt) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  ChatMessage m = parse_chat_output("The user asks.\n</think>\n\nIt is sunny.", opts(false, true));
  EXPECT_EQ(m.reasoning_content, "The user asks.");
  EXPECT_EQ(m.content, "It is sunny.");
  // Qwen3.5 may open a call without closing the reasoning: the call ends it.
  m = parse_chat_output(
      "Need the tool.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n"
      "</parameter>\n</function>\n</tool_call>",
      opts(true, true));
  EXPECT_EQ(m.reasoning_content, "Need the tool.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"location":"Paris"})");
}

TEST(ChatOutput, HermesCalls) {
  ChatMessage m = parse_chat_output(
      "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"Zürich\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"東京\"}}\n</tool_call>",
      opts());
  EXPECT_EQ(m.content, "Let me check.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].id, "call_0");
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"location":"Zürich","days":2})");
  EXPECT_EQ(m.tool_calls[1].arguments, R"({"location":"東京"})");
  json j = m.to_json();
  EXPECT_EQ(j["tool_calls"][1]["function"]["name"], "get_weather");
  EXPECT_EQ(j["tool_calls"][1]["type"], "function");
}

TEST(ChatOutput, XmlValuesTypedBySchema) {
  const std::string out =
      "<tool_call>\n<function=configure>\n"
      "<parameter=code>\n007\n</parameter>\n"
      "<parameter=ratio>\n0.5\n</parameter>\n"
      "<parameter=on>\ntrue\n</parameter>\n"
      "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n"
      "<parameter=list>\n[\"x\", 1]\n</parameter>\n"
      "<parameter=maybe>\nnull\n</parameter>\n"
      "<parameter=either>\n12\n</parameter>\n"
      "<parameter=mode>\nfast\n</parameter>\n"
      "<parameter=free>\nline one\nx = \"</parameter>\"\n</parameter>\n"
      "</function>\n</tool_call>";
  ChatMessage m = parse_chat_output(out, opts());
  ASSERT_EQ(m.tool_calls.size(), 1u) << m.content;
  json args = json::parse(m.tool_calls[0].arguments);
  EXPECT_EQ(args["code"], "007");  // a string stays a string, even when it looks like a number
  EXPECT_EQ(args["ratio"], 0.5);
  EXPECT_EQ(args["on"], true);
  EXPECT_EQ(args["opts"], json::parse(R"({"a": [1, 2]})"));
  EXPECT_EQ(args["list"], json::parse(R"(["x", 1])"));
  EXPECT_TRUE(args["maybe"].is_null());
  EXPECT_EQ(args["either"], 12);  // integer or string: JSON of an admitted type wins
  EXPECT_EQ(args["mode"], "fast");
  EXPECT_EQ(args["free"], "line one\nx = \"</parameter>\"");  // no constraint, not JSON: the text
  std::vector<std::string> keys;
  for (auto it = args.begin(); it != args.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys.front(), "code");  // the order the model wrote them
  EXPECT_EQ(keys.back(), "free");
}

TEST(ChatOutput, MalformedOutputIsContent) {
  const std::vector<std::string> bad = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": }\n</tool_call>",  // bad JSON
      "<tool_call>\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n</tool_call>",  // unknown
                                                                                       // tool
      "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</"
      "tool_call>",  // required missing
      "<tool_call>\n<function=get_weather>\n<parameter=location>\nx\n</"
      "parameter>\n<parameter=days>\nthree\n"
      "</parameter>\n</function>\n</tool_call>",  // an integer that is not JSON
      "<tool_call>\n<function=get_weather>\n<parameter=location>\nx\n</"
      "parameter>\n<parameter=color>\nred\n"
      "</parameter>\n</function>\n</tool_call>",  // a parameter outside the schema
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"x\"}}",  // never
                                                                                         // closed
      "<tool_call><function=get_weather>",  // truncated
  };
  for (const auto& text : bad) {
    ChatMessage m = parse_chat_output("Before. " + text, opts());
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_EQ(m.content, "Before. " + text);
  }
  // A bad block between good ones is content; the good ones are calls.
  ChatMessage m = parse_chat_output(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"a\"}}\n</tool_call>\n"
      "<tool_call>\nnot a call\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"b\"}}\n</tool_call>",
      opts());
  EXPECT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.content, "<tool_call>\nnot a call\n</tool_call>");
  // Tools off (tool_choice none): the text stays content.
  m = parse_chat_output("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
                        opts(false));
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ChatOutput, StreamingInRandomPiecesEqualsOneShot) {
  std::mt19937 rng(27);
  const std::vector<std::string> outputs = {
      "<think>\nPlan: call the tool.\n</think>\n\nChecking.\n\n<tool_call>\n{\"name\": "
      "\"get_weather\", "
      "\"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
      "<think>\n\n</think>\n\nNo tools <needed> here </tool_call> <tool_call partial",
      "Text with < and <t and <th and </thi, then end <",
      "<tool_call>\n<function=configure>\n<parameter=code>\nx < y && "
      "z\n</parameter>\n<parameter=ratio>\n2\n"
      "</parameter>\n</function>\n</"
      "tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=location>\n"
      "Zürich 🌧\n</parameter>\n</function>\n</tool_call>",
      "  <think>  spaced  </think>  after  \n\n",
      "<tool_call>\n{\"name\": \"get_weather\"\n</tool_call> broken then fine "
      "<tool_call>{\"name\": \"get_weather\", "
      "\"arguments\": {\"location\": \"q\"}}</tool_call>",
      "",
  };
  for (const auto& text : outputs) {
    for (bool in_reasoning : {false, true}) {
      for (bool tools_on : {false, true}) {
        for (int rep = 0; rep < 20; ++rep)
          expect_streaming_matches(text, opts(tools_on, in_reasoning), rng);
      }
    }
  }
}

TEST(ChatOutput, DeltaJsonHasLlamaServerShape) {
  ChatDelta d;
  d.content = "x";
  d.tool_calls = {{0, "call_0", "get_weather", ""}, {0, "", "", "{\"a\":1}"}};
  json j = delta_to_json(d);
  EXPECT_EQ(j["content"], "x");
  EXPECT_FALSE(j.contains("reasoning_content"));
  EXPECT_EQ(
      j["tool_calls"][0],
      json::parse(
          R"({"index":0,"id":"call_0","type":"function","function":{"name":"get_weather","arguments":""}})"));
  EXPECT_EQ(j["tool_calls"][1], json::parse(R"({"index":0,"function":{"arguments":"{\"a\":1}"}})"));
}

TEST(ChatOutput, ChoicesAndFormats) {
  EXPECT_EQ(parse_tool_choice(json("none")), ToolChoice::none);
  EXPECT_EQ(parse_tool_choice(json("auto")), ToolChoice::auto_);
  EXPECT_EQ(parse_tool_choice(json()), ToolChoice::auto_);
  EXPECT_EQ(parse_tool_choice(json("required")), ToolChoice::required);
  EXPECT_FALSE(tool_choice_parses_calls(ToolChoice::none));
  EXPECT_TRUE(tool_choice_parses_calls(ToolChoice::required));
  EXPECT_THROW(parse_tool_choice(json::parse(R"({"type":"function","function":{"name":"f"}})")),
               ferry::Error);
  EXPECT_THROW(parse_tool_choice(json("sometimes")), ferry::Error);
  EXPECT_EQ(parse_reasoning_format("none"), ReasoningFormat::none);
  EXPECT_EQ(parse_reasoning_format("deepseek"), ReasoningFormat::deepseek);
  EXPECT_EQ(parse_reasoning_format("auto"), ReasoningFormat::deepseek);
  EXPECT_THROW(parse_reasoning_format("xml"), ferry::Error);
}
