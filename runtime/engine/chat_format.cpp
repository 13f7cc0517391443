#include "runtime/engine/chat_format.hpp"

#include <fstream>
#include <sstream>

#include "runtime/chat/chat_output.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "{} {}: cannot read it", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const char* template_origin_name(TemplateOrigin o) {
  switch (o) {
    case TemplateOrigin::gguf:
      return "gguf";
    case TemplateOrigin::file:
      return "file";
    case TemplateOrigin::chatml_fallback:
      return "chatml-fallback";
  }
  return "?";
}

const char* chatml_template() {
  // format_chatml (runtime/tokenizer) in Jinja, the four-line template llama.cpp's converter
  // writes for ChatML models.
  return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
         "{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

ChatFormat load_chat_format(const gguf::File& model, const ChatFormatArgs& args) {
  ChatFormat f;
  if (!args.template_file.empty()) {
    f.source = read_text(args.template_file, "--chat-template-file");
    f.origin = TemplateOrigin::file;
    f.origin_path = args.template_file;
  } else if (auto t = model.get_string_opt("tokenizer.chat_template"); t && !t->empty()) {
    f.source = *t;
    f.origin = TemplateOrigin::gguf;
    f.origin_path = model.path();
  } else {
    f.source = chatml_template();
    f.origin = TemplateOrigin::chatml_fallback;
    f.origin_path = model.path();
  }
  try {
    f.tmpl = std::make_shared<const chat::Template>(f.source);
  } catch (const chat::TemplateError& e) {
    const std::string where = f.origin == TemplateOrigin::file
                                  ? fmt::format("--chat-template-file {}", f.origin_path)
                                  : fmt::format("tokenizer.chat_template of {}", f.origin_path);
    throw chat::TemplateError(e.failure(), e.line(),
                              fmt::format("{} (chat template of {})", e.detail(), where));
  }
  chat::ChatServerDefaults& d = f.defaults;
  d.reasoning_format = chat::parse_reasoning_format(args.reasoning_format);
  if (args.reasoning_budget < -1)
    fail(ErrorKind::invalid_arg, "--reasoning-budget {}: must be -1 (unlimited) or >= 0",
         args.reasoning_budget);
  // llama-server: a positive budget is not enforced either; only 0 changes the rendering.
  d.reasoning_budget = args.reasoning_budget;
  if (!args.template_kwargs_json.empty()) {
    nlohmann::ordered_json kw;
    try {
      kw = nlohmann::ordered_json::parse(args.template_kwargs_json);
    } catch (const nlohmann::json::parse_error& e) {
      fail(ErrorKind::invalid_arg, "--chat-template-kwargs: not JSON: {}", e.what());
    }
    if (!kw.is_object())
      fail(ErrorKind::invalid_arg, "--chat-template-kwargs: must be a JSON object, got {}",
           kw.type_name());
    if (kw.contains("enable_thinking") && !kw["enable_thinking"].is_boolean())
      fail(ErrorKind::invalid_arg, "--chat-template-kwargs: enable_thinking must be a boolean");
    d.chat_template_kwargs = std::move(kw);
  }
  return f;
}

void set_special_texts(ChatFormat& f, const Tokenizer& tok) {
  f.defaults.bos_token = tok.bos() >= 0 ? tok.token_bytes(tok.bos(), /*render_special=*/true) : "";
  f.defaults.eos_token = tok.eos() >= 0 ? tok.token_bytes(tok.eos(), /*render_special=*/true) : "";
}

std::shared_ptr<const std::vector<int32_t>> read_forced_tokens(const std::string& path,
                                                               const Tokenizer& tok) {
  const std::string text = read_text(path, "FERRY_TEST_FORCE_TOKENS");
  std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/false, /*parse_special=*/true);
  const int32_t end = tok.eot() >= 0 ? tok.eot() : tok.eos();
  if (end < 0)
    fail(ErrorKind::invalid_arg,
         "FERRY_TEST_FORCE_TOKENS: the vocabulary has no end-of-turn or EOS token to end with");
  ids.push_back(end);
  return std::make_shared<const std::vector<int32_t>>(std::move(ids));
}

}  // namespace ferry
