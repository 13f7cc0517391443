// render_tool CASES.json: renders every case of a JSON array and prints a JSON array of results,
// one per case, for tests/chat/test_template_parity.py. A case is
//   {"template": "<path to a .jinja file>" (or "source": "<the template text>"),
//    "mode": "template" | "chat", "now": <unix seconds>,
//    "context": {...}}            mode template: the context is given to the template as is
//    "request": {...}}            mode chat:
//    messages/tools/add_generation_prompt/bos_token/eos_token/
//                                 chat_template_kwargs through ferry::chat::render_chat
// A result is {"ok": true, "text": "..."} or {"ok": false, "failure": "syntax|unsupported|raised|
// runtime|request", "message": "..."}.
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "runtime/chat/chat_render.hpp"

using json = nlohmann::ordered_json;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: render_tool CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "render_tool: cannot open " << argv[1] << "\n";
    return 2;
  }
  json cases = json::parse(in);
  std::map<std::string, std::shared_ptr<ferry::chat::Template>> parsed;
  json results = json::array();
  for (const auto& c : cases) {
    json r;
    try {
      std::shared_ptr<ferry::chat::Template> tmpl;
      if (c.contains("source")) {
        tmpl = std::make_shared<ferry::chat::Template>(c["source"].get<std::string>());
      } else {
        const std::string path = c.at("template").get<std::string>();
        auto& cached = parsed[path];
        if (!cached) {
          std::ifstream f(path);
          if (!f) throw std::runtime_error("cannot open template " + path);
          std::stringstream ss;
          ss << f.rdbuf();
          cached = std::make_shared<ferry::chat::Template>(ss.str());
        }
        tmpl = cached;
      }
      const std::time_t now = c.value("now", std::time_t{0});
      if (c.value("mode", "template") == "chat") {
        const json& q = c.at("request");
        ferry::chat::ChatTemplateInputs inputs;
        inputs.messages = q.at("messages");
        inputs.tools = q.value("tools", json());
        inputs.add_generation_prompt = q.value("add_generation_prompt", true);
        inputs.bos_token = q.value("bos_token", "");
        inputs.eos_token = q.value("eos_token", "");
        inputs.chat_template_kwargs = q.value("chat_template_kwargs", json::object());
        inputs.now = now;
        r = {{"ok", true}, {"text", ferry::chat::render_chat(*tmpl, inputs)}};
      } else {
        r = {{"ok", true}, {"text", tmpl->render(c.at("context"), now)}};
      }
    } catch (const ferry::chat::TemplateError& e) {
      static const char* names[] = {"syntax", "unsupported", "raised", "runtime"};
      r = {{"ok", false}, {"failure", names[static_cast<int>(e.failure())]}, {"message", e.what()}};
    } catch (const ferry::Error& e) {
      r = {{"ok", false}, {"failure", "request"}, {"message", e.what()}};
    }
    results.push_back(r);
  }
  std::cout << results.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}
