#pragma once
// The chat prompt of a conversation: one function, so that the chat-template engine can replace
// the ChatML rendering in one place. `ferry chat` renders with the same format_chatml.
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::server {

// The rendered prompt, ending with the assistant header (the generation prompt).
std::string render_chat_prompt(const std::vector<ChatMessage>& messages);
// The template text /props reports as "chat_template".
const char* chat_template_text();

}  // namespace ferry::server
