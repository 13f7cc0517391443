#pragma once
// The chat format `ferry serve` and `ferry chat` share: the model's Jinja chat template (the
// GGUF's tokenizer.chat_template, a --chat-template-file, or ChatML when the file has neither),
// parsed once, and llama-server's chat defaults (--reasoning-format, --reasoning-budget,
// --chat-template-kwargs, the vocabulary's BOS/EOS texts).
#include <memory>
#include <string>

#include "runtime/chat/chat_request.hpp"
#include "runtime/chat/template.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry {

// The flags, as given on the command line.
struct ChatFormatArgs {
  std::string template_file;          // --chat-template-file ("" = the GGUF's)
  std::string template_kwargs_json;   // --chat-template-kwargs (a JSON object; "" = none)
  std::string reasoning_format = "auto";  // --reasoning-format deepseek|none|auto
  int reasoning_budget = -1;          // --reasoning-budget: -1 unlimited, 0 thinking off
  bool jinja = true;  // --jinja: accepted (llama-server's switch); templates are always Jinja
};

// Where the template came from (shown by /props and at startup).
enum class TemplateOrigin { gguf, file, chatml_fallback };
const char* template_origin_name(TemplateOrigin o);  // "gguf" | "file" | "chatml-fallback"

struct ChatFormat {
  std::string source;  // the template text
  TemplateOrigin origin = TemplateOrigin::gguf;
  std::string origin_path;  // the GGUF or the template file
  std::shared_ptr<const chat::Template> tmpl;
  chat::ChatServerDefaults defaults;
};

// ChatML as GGUF files carry it: the fallback for a model without a template.
const char* chatml_template();

// Reads and parses the template and checks the flags. Errors: ErrorKind::io for an unreadable
// file; the TemplateError of a template that does not parse, its message prefixed with where the
// template came from and naming the template line; ErrorKind::invalid_arg for a bad flag value
// (--chat-template-kwargs not a JSON object, enable_thinking not a boolean, --reasoning-format
// unknown, --reasoning-budget < -1).
ChatFormat load_chat_format(const gguf::File& model, const ChatFormatArgs& args);

// The vocabulary's BOS/EOS as texts for templates that print them ("" when the vocabulary has
// none).
void set_special_texts(ChatFormat& f, const Tokenizer& tok);

// The test-only forced reply (docs/server.md, FERRY_TEST_FORCE_TOKENS): the text of `path`
// tokenized with special tokens parsed, then the vocabulary's end of turn (EOT, else EOS).
// ErrorKind::io when it cannot be read; invalid_arg when the vocabulary has no end token.
std::shared_ptr<const std::vector<int32_t>> read_forced_tokens(const std::string& path,
                                                               const Tokenizer& tok);

}  // namespace ferry
