#include "runtime/cli/chat_args.hpp"

#include <cstdio>
#include <cstdlib>

namespace ferry::cli {

void add_chat_format_args(CLI::App& app, ChatFormatArgs& a) {
  app.add_option("--chat-template-file", a.template_file,
                 "Jinja chat template to use instead of the model's tokenizer.chat_template");
  // llama-server needs --jinja for the model's own template; here it is always used.
  app.add_flag("--jinja", a.jinja, "accepted for llama-server compatibility: templates are always Jinja");
  app.add_option("--chat-template-kwargs", a.template_kwargs_json,
                 "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}' "
                 "(a request's chat_template_kwargs win)");
  app.add_option("--reasoning-format", a.reasoning_format,
                 "deepseek: <think>...</think> goes to reasoning_content; none: kept in the "
                 "content; auto: deepseek")
      ->check(CLI::IsMember({"deepseek", "none", "auto"}))
      ->capture_default_str();
  app.add_option("--reasoning-budget", a.reasoning_budget,
                 "-1: unlimited thinking; 0: thinking off (the template gets enable_thinking "
                 "false); other budgets are not enforced")
      ->capture_default_str();
}

std::string forced_tokens_file(const char* command) {
  const char* f = std::getenv("FERRY_TEST_FORCE_TOKENS");
  if (f == nullptr || *f == '\0') return {};
  std::fprintf(stderr,
               "%s: FERRY_TEST_FORCE_TOKENS=%s: test mode, every reply is that file's text, not "
               "the model's\n",
               command, f);
  return f;
}

}  // namespace ferry::cli
