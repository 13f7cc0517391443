#include "runtime/server/prompt.hpp"

namespace ferry::server {

std::string render_chat_prompt(const std::vector<ChatMessage>& messages) {
  return format_chatml(messages, /*add_generation_prompt=*/true);
}

const char* chat_template_text() {
  // format_chatml in Jinja, as GGUF files carry it: what a client sees is what the server renders.
  return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + "
         "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
         "'<|im_start|>assistant\\n' }}{% endif %}";
}

}  // namespace ferry::server
