#pragma once
// The chat prompt of a request: the request's messages and tools rendered through the server's
// chat template (runtime/engine/chat_format.hpp: the GGUF's, --chat-template-file, or the ChatML
// fallback) by the chat library, and how the reply will be parsed. `ferry chat` renders through
// the same library and template loader.
#include <string>

#include "runtime/chat/chat_output.hpp"
#include "runtime/engine/chat_format.hpp"

namespace ferry::server {

struct RenderedChat {
  std::string text;                // the prompt, ending with the generation prompt when asked
  chat::ChatParseOptions parse;    // how to split the reply (reasoning, tool calls)
};

// Renders `r` through `f`. The library's refusals become API errors:
//   400 invalid_request_error  a malformed message (content parts, tool-call arguments that are
//                              not JSON), the template's raise_exception, a jinja2 runtime error
//                              on what the request holds;
//   500 server_error           the template uses a construct Ferry's interpreter lacks (the message
//                              names the template line), or tools were given to a template that
//                              ignores them (the model would never see them).
RenderedChat render_chat_prompt(const ChatFormat& f, const chat::ChatRequest& r);

}  // namespace ferry::server
