#include "runtime/server/prompt.hpp"

#include "runtime/chat/chat_render.hpp"
#include "runtime/core/error.hpp"
#include "runtime/server/api_error.hpp"

namespace ferry::server {

RenderedChat render_chat_prompt(const ChatFormat& f, const chat::ChatRequest& r) {
  if (!f.tmpl) throw ApiError(500, "server_error", "no chat template is loaded");
  RenderedChat out;
  try {
    out.text = chat::render_chat(*f.tmpl, r.inputs);
  } catch (const chat::TemplateError& e) {
    // raise_exception and jinja2's runtime errors are about what the request holds (Qwen3.5:
    // "No user query found in messages."); an unsupported construct is the server's.
    if (e.failure() == chat::TemplateFailure::unsupported)
      throw ApiError(500, "server_error", fmt::format("chat template: {}", e.what()));
    throw ApiError(400, "invalid_request_error", fmt::format("chat template: {}", e.what()));
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::invalid_arg)
      throw ApiError(400, "invalid_request_error", e.what());
    if (e.kind() == ErrorKind::unsupported)
      throw ApiError(500, "server_error",
                     fmt::format("{} (chat template from {})", e.what(),
                                 template_origin_name(f.origin)));
    throw;
  }
  out.parse = chat::chat_parse_options(r, out.text);
  return out;
}

}  // namespace ferry::server
