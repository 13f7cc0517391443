#pragma once
// A parsed Jinja chat template and its renderer: the subset of jinja2 the chat templates of the
// models Ferry serves use, evaluated as transformers' chat-template environment does
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loopcontrols, its
// tojson, raise_exception and strftime_now). docs/chat-templates.md lists what is supported.
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/chat/template_error.hpp"

namespace ferry::chat {

struct Stmt;

class Template {
 public:
  // Parses the source; throws TemplateError (syntax, or unsupported with the line) when it cannot.
  explicit Template(const std::string& source);

  // Renders with the variables of `context` (a JSON object: messages, tools, add_generation_prompt,
  // bos_token, ...). `now` is what strftime_now formats (UTC); tests pin it. Throws TemplateError.
  std::string render(const nlohmann::ordered_json& context, std::time_t now) const;
  std::string render(const nlohmann::ordered_json& context) const {
    return render(context, std::time(nullptr));
  }

 private:
  std::shared_ptr<const std::vector<std::shared_ptr<const Stmt>>> body_;
  std::vector<std::string> undefined_at_entry_;  // the template frame's (runtime/chat/ast.hpp)
};

}  // namespace ferry::chat
