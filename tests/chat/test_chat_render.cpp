// The chat renderer with the committed templates: request normalisation, thinking on/off, typed
// content, requests that cannot be rendered faithfully, and tool calls that round-trip through a
// template and the output parser (schema-typed XML values included).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/chat/chat_output.hpp"
#include "runtime/chat/chat_render.hpp"

using namespace ferry::chat;
using json = nlohmann::ordered_json;

namespace {

Template load(const std::string& name) {
  std::ifstream f(std::string(FERRY_SOURCE_DIR) + "/tests/data/templates/" + name);
  EXPECT_TRUE(f.good()) << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return Template(ss.str());
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
      "opts": {"type": "object"}, "tags": {"type": "array"}}, "required": ["location"]}}}])");

ferry::ErrorKind kind_of(const Template& t, const ChatTemplateInputs& in) {
  try {
    render_chat(t, in);
  } catch (const ferry::Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "rendered";
  return ferry::ErrorKind::internal;
}

}  // namespace

TEST(ChatRender, NormalisesLikeLlamaServer) {
  json msgs = json::parse(R"([
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"location\": \"Oslo\"}"}}]}])");
  json out = normalize_messages(msgs);
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_EQ(out[1]["content"], "one\ntwo");
  EXPECT_EQ(out[2]["tool_calls"][0]["function"]["arguments"],
            json::parse(R"({"location": "Oslo"})"));
  EXPECT_TRUE(normalize_messages(msgs, true)[1]["content"].is_array());

  auto bad = [](const char* text) {
    try {
      normalize_messages(json::parse(text));
    } catch (const ferry::Error& e) {
      return e.kind();
    }
    return ferry::ErrorKind::internal;
  };
  EXPECT_EQ(bad(R"({"role": "user"})"), ferry::ErrorKind::invalid_arg);
  EXPECT_EQ(bad(R"([{"content": "no role"}])"), ferry::ErrorKind::invalid_arg);
  EXPECT_EQ(bad(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"),
            ferry::ErrorKind::invalid_arg);
  EXPECT_EQ(
      bad(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}])"),
      ferry::ErrorKind::invalid_arg);
}

TEST(ChatRender, Qwen35ThinkingOnAndOff) {
  Template t = load("Qwen3.5-4B.jinja");
  ChatTemplateInputs in;
  in.messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  std::string on = render_chat(t, in);
  EXPECT_EQ(on, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_TRUE(prompt_opens_reasoning(on));
  in.enable_thinking = false;  // --reasoning-budget 0
  std::string off = render_chat(t, in);
  EXPECT_EQ(off, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(prompt_opens_reasoning(off));
  in.chat_template_kwargs = {{"enable_thinking", true}};  // the request's kwargs win
  EXPECT_EQ(render_chat(t, in), on);
}

TEST(ChatRender, TypedContentWhereTheTemplateTakesIt) {
  json msgs = json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}])");
  ChatTemplateInputs in;
  in.messages = msgs;
  in.add_generation_prompt = false;
  Template qwen35 = load("Qwen3.5-4B.jinja");
  Template qwen3 = load("Qwen-Qwen3-0.6B.jinja");
  EXPECT_TRUE(template_takes_typed_content(qwen35));
  EXPECT_FALSE(template_takes_typed_content(qwen3));
  EXPECT_FALSE(template_takes_typed_content(load("meta-llama-Llama-3.1-8B-Instruct.jinja")));
  EXPECT_EQ(render_chat(qwen35, in), "<|im_start|>user\nonetwo<|im_end|>\n");
  EXPECT_EQ(render_chat(qwen3, in), "<|im_start|>user\none\ntwo<|im_end|>\n");
}

TEST(ChatRender, UnfaithfulRequestsAreErrors) {
  ChatTemplateInputs in;
  in.messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  in.tools = kTools;
  Template chatml(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
  EXPECT_EQ(kind_of(chatml, in), ferry::ErrorKind::unsupported);  // tools would be dropped silently
  EXPECT_NE(render_chat(load("Qwen-Qwen3-0.6B.jinja"), in).find("\"name\": \"get_weather\""),
            std::string::npos);
  // The template itself refuses: no user message.
  in.messages = json::parse(R"([{"role": "system", "content": "s"}])");
  try {
    render_chat(load("Qwen3.5-4B.jinja"), in);
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.failure(), TemplateFailure::raised);
    EXPECT_EQ(e.detail(), "No user query found in messages.");
  }
}

// A call rendered by the template into the assistant turn, read back by the parser, is the call.
TEST(ChatRender, ToolCallsRoundTripThroughTemplateAndParser) {
  const json args =
      json::parse(R"({"location": "007", "days": 3, "opts": {"metric": true}, "tags": ["a", 1]})");
  for (const char* name : {"Qwen3.5-4B.jinja", "Qwen3-Coder.jinja", "Qwen-Qwen3-0.6B.jinja",
                           "Qwen-Qwen2.5-7B-Instruct.jinja"}) {
    SCOPED_TRACE(name);
    Template t = load(name);
    ChatTemplateInputs in;
    in.tools = kTools;
    in.add_generation_prompt = false;
    in.messages = json::array();
    in.messages.push_back({{"role", "user"}, {"content", "Weather?"}});
    json call = {{"id", "c1"},
                 {"type", "function"},
                 {"function", {{"name", "get_weather"}, {"arguments", args.dump()}}}};
    json second = call;
    second["function"]["arguments"] = R"({"location": "Zürich\nnorth"})";
    in.messages.push_back(
        {{"role", "assistant"}, {"content", "Checking."}, {"tool_calls", {call, second}}});
    std::string prompt = render_chat(t, in);
    const std::string head = "<|im_start|>assistant\n";
    size_t at = prompt.rfind(head);
    ASSERT_NE(at, std::string::npos);
    std::string turn = prompt.substr(at + head.size());
    turn = turn.substr(0, turn.rfind("<|im_end|>"));
    ChatParseOptions o;
    o.parse_tool_calls = true;
    o.tools = kTools;
    o.make_id = [](size_t i) { return "id" + std::to_string(i); };
    ChatMessage m = parse_chat_output(turn, o);
    EXPECT_EQ(m.content, "Checking.");
    ASSERT_EQ(m.tool_calls.size(), 2u) << turn;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(m.tool_calls[0].arguments), args);
    EXPECT_EQ(json::parse(m.tool_calls[1].arguments),
              json::parse(R"({"location": "Zürich\nnorth"})"));
  }
}
