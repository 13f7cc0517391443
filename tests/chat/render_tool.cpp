// render_tool CASES.json [--repeat N]: renders every case of a JSON array and prints a JSON array
// of results, one per case, for tests/chat/test_template_parity.py. With --repeat, every case is
// rendered N times more and the mean time of one render is printed to stderr (a measurement aid;
// the template is parsed once, as a server would). A case is
//   {"template": "<path to a .jinja file>" (or "source": "<the template text>"),
//    "mode": "template" | "chat", "now": <unix seconds>,
//    "context": {...}}            mode template: the context is given to the template as is
//    "request": {...}}            mode chat:
//    messages/tools/add_generation_prompt/bos_token/eos_token/
//                                 chat_template_kwargs through ferry::chat::render_chat
// A result is {"ok": true, "text": "..."} or {"ok": false, "failure": "syntax|unsupported|raised|
// runtime|request", "message": "..."}.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "runtime/chat/chat_render.hpp"

using json = nlohmann::ordered_json;

namespace {

using Cache = std::map<std::string, std::shared_ptr<ferry::chat::Template>>;

// The case's template: parsed from "source", or read from the "template" path once per path (a
// missing file is the harness's error, not a case result: it throws std::runtime_error).
std::shared_ptr<ferry::chat::Template> template_of(const json& c, Cache& cache) {
  if (c.contains("source"))
    return std::make_shared<ferry::chat::Template>(c["source"].get<std::string>());
  const std::string path = c.at("template").get<std::string>();
  auto& cached = cache[path];
  if (!cached) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open template " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    cached = std::make_shared<ferry::chat::Template>(ss.str());
  }
  return cached;
}

std::string render(const ferry::chat::Template& tmpl, const json& c) {
  const std::time_t now = c.value("now", std::time_t{0});
  if (c.value("mode", "template") != "chat") return tmpl.render(c.at("context"), now);
  const json& q = c.at("request");
  ferry::chat::ChatTemplateInputs inputs;
  inputs.messages = q.at("messages");
  inputs.tools = q.value("tools", json());
  inputs.add_generation_prompt = q.value("add_generation_prompt", true);
  inputs.bos_token = q.value("bos_token", "");
  inputs.eos_token = q.value("eos_token", "");
  inputs.chat_template_kwargs = q.value("chat_template_kwargs", json::object());
  inputs.now = now;
  return ferry::chat::render_chat(tmpl, inputs);
}

json render_case(const json& c, Cache& cache, int repeat, double& seconds) {
  try {
    auto tmpl = template_of(c, cache);
    json r = {{"ok", true}, {"text", render(*tmpl, c)}};
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < repeat; ++k) render(*tmpl, c);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  } catch (const ferry::chat::TemplateError& e) {
    static const char* names[] = {"syntax", "unsupported", "raised", "runtime"};
    return {
        {"ok", false}, {"failure", names[static_cast<int>(e.failure())]}, {"message", e.what()}};
  } catch (const ferry::Error& e) {
    return {{"ok", false}, {"failure", "request"}, {"message", e.what()}};
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 0;
  if (argc == 4 && std::string(argv[2]) == "--repeat") repeat = std::atoi(argv[3]);
  if (argc != 2 && !(argc == 4 && repeat > 0)) {
    std::cerr << "usage: render_tool CASES.json [--repeat N]\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    if (!in) throw std::runtime_error(std::string("cannot open ") + argv[1]);
    json cases = json::parse(in);
    Cache cache;
    json results = json::array();
    double seconds = 0;
    for (const auto& c : cases) results.push_back(render_case(c, cache, repeat, seconds));
    std::cout << results.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    if (repeat > 0)
      std::cerr << "render_tool: " << cases.size() << " case(s) x " << repeat << ": "
                << seconds / (static_cast<double>(cases.size()) * repeat) * 1e6
                << " us per render\n";
  } catch (const std::exception& e) {
    std::cerr << "render_tool: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
