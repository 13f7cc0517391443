// The server's chat template (runtime/engine/chat_format.hpp) and prompt (runtime/server/prompt.hpp):
// where the template comes from, the startup error of one that does not parse, the flags, and the
// library's refusals mapped to HTTP statuses. Each case writes a metadata-only GGUF (no tensors).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/gguf/gguf.hpp"
#include "runtime/server/api_error.hpp"
#include "runtime/server/prompt.hpp"
#include "runtime/server/request.hpp"

namespace ferry::server {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kTemplates = std::string(FERRY_SOURCE_DIR) + "/tests/data/templates/";

// A GGUF holding only general.architecture and, when given, tokenizer.chat_template.
std::string gguf_with(const std::string& name, const std::string* chat_template) {
  const std::string dir = std::string(FERRY_BINARY_DIR) + "/server-scratch";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name + ".gguf";
  gguf::Writer w(path);
  w.set("general.architecture", gguf::Value::str("qwen3moe"));
  if (chat_template) w.set("tokenizer.chat_template", gguf::Value::str(*chat_template));
  w.finish();
  return path;
}

ChatFormat load(const std::string& name, const std::string* tmpl, const ChatFormatArgs& a = {}) {
  return load_chat_format(gguf::File::open(gguf_with(name, tmpl)), a);
}

chat::ChatRequest request(const char* body, const chat::ChatServerDefaults& d) {
  return parse_chat_fields(ojson::parse(body), d);
}

// The status and message of the ApiError `fn` throws.
template <typename F>
std::pair<int, std::string> api_error(F fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return {e.status(), e.what()};
  }
  return {0, "no error"};
}

const char* kToolsBody = R"({"messages":[{"role":"user","content":"Weather in Oslo?"}],
  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
  "properties":{"location":{"type":"string"}},"required":["location"]}}}]})";

TEST(ChatPrompt, TemplateFromTheGgufElseChatmlFallback) {
  const std::string t = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}";
  ChatFormat f = load("with-template", &t);
  EXPECT_EQ(f.origin, TemplateOrigin::gguf);
  EXPECT_EQ(f.source, t);
  f.defaults.bos_token = "<s>";
  const auto r = request(R"({"messages":[{"role":"user","content":"hi"}]})", f.defaults);
  EXPECT_EQ(render_chat_prompt(f, r).text, "<s>[user]hi");

  const ChatFormat c = load("without-template", nullptr);
  EXPECT_EQ(c.origin, TemplateOrigin::chatml_fallback);
  EXPECT_STREQ(template_origin_name(c.origin), "chatml-fallback");
  EXPECT_EQ(render_chat_prompt(c, request(R"({"messages":[{"role":"user","content":"hi"}]})",
                                          c.defaults))
                .text,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // Tools given to ChatML: the model would never see them, so the request fails (500).
  const auto [status, msg] =
      api_error([&] { render_chat_prompt(c, request(kToolsBody, c.defaults)); });
  EXPECT_EQ(status, 500);
  EXPECT_NE(msg.find("does not render 'tools'"), std::string::npos) << msg;
}

TEST(ChatPrompt, BrokenTemplateIsAStartupErrorNamingTheLine) {
  const std::string t = "{% for m in messages %}\n{{ m.content }}\n{% endfor %}\n{% if %}";
  try {
    load("broken-template", &t);
    FAIL() << "loaded";
  } catch (const chat::TemplateError& e) {
    EXPECT_EQ(e.line(), 4);
    const std::string what = e.what();
    EXPECT_NE(what.find("template line 4"), std::string::npos) << what;
    EXPECT_NE(what.find("tokenizer.chat_template of"), std::string::npos) << what;
  }
}

TEST(ChatPrompt, Qwen35TemplateFileThinkingToolsAndRefusals) {
  ChatFormatArgs a;
  a.template_file = kTemplates + "Qwen3.5-4B.jinja";
  const ChatFormat f = load("file-template", nullptr, a);
  EXPECT_EQ(f.origin, TemplateOrigin::file);
  const RenderedChat on = render_chat_prompt(f, request(kToolsBody, f.defaults));
  EXPECT_NE(on.text.find("get_weather"), std::string::npos);
  EXPECT_TRUE(on.text.ends_with("<|im_start|>assistant\n<think>\n")) << on.text;
  EXPECT_TRUE(on.parse.starts_in_reasoning);
  EXPECT_TRUE(on.parse.parse_tool_calls);
  // tool_choice none: rendered, not parsed.
  const RenderedChat none = render_chat_prompt(
      f, request(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none",
                    "tools":[{"type":"function","function":{"name":"f"}}]})",
                 f.defaults));
  EXPECT_FALSE(none.parse.parse_tool_calls);
  // Thinking off by the request, then by --reasoning-budget 0 (a request may turn it back on).
  const RenderedChat off = render_chat_prompt(
      f, request(R"({"messages":[{"role":"user","content":"x"}],
                    "chat_template_kwargs":{"enable_thinking":false}})",
                 f.defaults));
  EXPECT_TRUE(off.text.ends_with("<think>\n\n</think>\n\n")) << off.text;
  EXPECT_FALSE(off.parse.starts_in_reasoning);
  ChatFormatArgs b = a;
  b.reasoning_budget = 0;
  const ChatFormat f0 = load("file-template-budget0", nullptr, b);
  EXPECT_EQ(render_chat_prompt(f0, request(R"({"messages":[{"role":"user","content":"x"}]})",
                                           f0.defaults))
                .text,
            off.text);
  // The template's raise_exception is the client's error.
  const auto [status, msg] = api_error([&] {
    render_chat_prompt(f, request(R"({"messages":[{"role":"system","content":"x"}]})", f.defaults));
  });
  EXPECT_EQ(status, 400);
  EXPECT_NE(msg.find("No user query found"), std::string::npos) << msg;
}

TEST(ChatPrompt, FlagAndFieldErrors) {
  ChatFormatArgs a;
  a.template_kwargs_json = "[1]";
  EXPECT_THROW(load("kwargs-array", nullptr, a), Error);
  a.template_kwargs_json = R"({"enable_thinking": "no"})";
  EXPECT_THROW(load("kwargs-thinking", nullptr, a), Error);
  a = {};
  a.reasoning_budget = -2;
  EXPECT_THROW(load("budget", nullptr, a), Error);
  a = {};
  a.template_file = kTemplates + "no-such.jinja";
  EXPECT_THROW(load("missing-file", nullptr, a), Error);
  a = {};
  a.template_kwargs_json = R"({"enable_thinking": false, "x": 1})";
  const ChatFormat f = load("kwargs-ok", nullptr, a);
  EXPECT_EQ(f.defaults.chat_template_kwargs["x"], 1);
  const auto [status, msg] = api_error([&] {
    request(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})",
            f.defaults);
  });
  EXPECT_EQ(status, 400);
  EXPECT_NE(msg.find("tool_choice"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ferry::server
