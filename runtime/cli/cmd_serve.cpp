// `ferry serve`: an OpenAI-compatible HTTP server with llama-server's flags, endpoints and error
// envelope (runtime/server; docs/server.md).
#include <fstream>
#include <sstream>

#include "runtime/cli/chat_args.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/load_observed.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/cli/offload_report.hpp"
#include "runtime/cli/prompt_cache_args.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/threads.hpp"
#include "runtime/model/config.hpp"
#include "runtime/server/serve.hpp"

namespace ferry::cli {
namespace {

constexpr const char* kExamples = R"(
Examples:
  ferry serve -m model.gguf                          loopback :8080, context from the model
  ferry serve -m model.gguf -np 4 -c 16384 --metrics 4 slots of 4096 tokens, /metrics on
  ferry serve -m model.gguf --host 0.0.0.0 --api-key-file key.txt   reachable from the network
  ferry serve -m model.gguf --device cuda --vram 8G  experts offloaded under an 8 GiB budget
Then: curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
        -d '{"messages":[{"role":"user","content":"Hello"}]}'
      or the openai client with base_url="http://127.0.0.1:8080/v1". The page at / chats and shows
      the offload counters.)";

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::vector<std::string> read_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::io, "--api-key-file {}: cannot read it", path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    if (!line.empty()) keys.push_back(line);
  }
  if (keys.empty())
    fail(ErrorKind::invalid_arg, "--api-key-file {}: no key in it (one per line)", path);
  return keys;
}

// CLI11 takes one-letter short options: llama-server's -np and -to become their long forms.
std::vector<std::string> serve_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-np")
      a = "--parallel";
    else if (a == "-to")
      a = "--timeout";
    else if (const char* flag = prompt_cache_long_flag(a))
      a = flag;
    out.push_back(std::move(a));
  }
  return out;
}

int serve_main(int argc, char** argv) {
  CLI::App app{"OpenAI-compatible HTTP server (llama-server's flags and endpoints)", "ferry serve"};
  app.footer(kExamples);
  ModelArgs ma;
  SamplingParams sp;
  add_model_args(app, ma);
  add_sampling_args(app, sp);
  server::ServeConfig cfg;
  server::ServerOptions& h = cfg.http;
  ChatFormatArgs chat_args;
  add_chat_format_args(app, chat_args);
  std::string api_key, api_key_file;
  bool insecure = false;
  int64_t max_body = static_cast<int64_t>(h.max_body_bytes);
  app.add_option("--host", h.host, "address to listen on")->capture_default_str();
  app.add_option("--port", h.port, "port to listen on (0: any free port, printed at start)")
      ->capture_default_str();
  app.add_option(
      "--api-key", api_key,
      "API key(s) clients must send (Authorization: Bearer KEY); several: comma-separated");
  app.add_option("--api-key-file", api_key_file, "file with API keys, one per line");
  app.add_flag("--insecure-no-key", insecure, "allow a non-loopback --host without an API key");
  app.add_option("--parallel", h.n_slots,
                 "slots: requests generated at once (-np); -c is split between them")
      ->capture_default_str();
  app.add_option("--queue", h.queue_max, "requests that may wait for a slot; more get 503")
      ->capture_default_str();
  app.add_option("--max-body", max_body, "largest request body in bytes (413 beyond)")
      ->capture_default_str();
  app.add_option("--timeout", h.timeout_s, "connection read/write timeout in seconds (-to)")
      ->capture_default_str();
  app.add_flag("--metrics", h.metrics,
               "enable the Prometheus /metrics endpoint (/metrics.json is always on)");
  app.add_option("-n,--n-predict", h.defaults.n_predict,
                 "cap on tokens per reply (-1: none; requests' max_tokens is capped by it)")
      ->capture_default_str();
  app.add_option("--alias", h.model_alias, "model id in /v1/models (default: the file name)");
  app.add_option("--shutdown-grace", h.grace_s,
                 "seconds running requests get to finish on SIGINT/SIGTERM")
      ->capture_default_str();
  app.add_option("--ping-interval", h.ping_ms,
                 "milliseconds between SSE pings while a stream waits")
      ->capture_default_str();
  PromptCacheArgs cache_args;
  add_prompt_cache_args(app, cache_args);
  std::vector<std::string> args = serve_args(argc, argv);
  std::vector<char*> ptrs;
  for (auto& s : args) ptrs.push_back(s.data());
  bool stop = false;
  const int rc = parse(app, static_cast<int>(ptrs.size()), ptrs.data(), stop);
  if (stop) return rc;

  if (ma.model.empty()) fail(ErrorKind::invalid_arg, "-m MODEL is required");
  if (!api_key.empty() && !api_key_file.empty())
    fail(ErrorKind::invalid_arg, "give --api-key or --api-key-file, not both");
  if (!api_key.empty()) {  // llama-server: several keys as a comma-separated list
    std::stringstream ss(api_key);
    for (std::string k; std::getline(ss, k, ',');)
      if (!k.empty()) h.api_keys.push_back(k);
    if (h.api_keys.empty()) fail(ErrorKind::invalid_arg, "--api-key: no key in \"{}\"", api_key);
  }
  if (!api_key_file.empty()) h.api_keys = read_keys(api_key_file);
  if (!is_loopback(h.host) && h.api_keys.empty() && !insecure)
    fail(ErrorKind::invalid_arg,
         "--host {} is reachable from other machines: give --api-key / --api-key-file, or "
         "--insecure-no-key",
         h.host);
  if (h.port < 0 || h.port > 65535) fail(ErrorKind::invalid_arg, "--port {}: not a port", h.port);
  if (h.n_slots < 1 || h.n_slots > 256)
    fail(ErrorKind::invalid_arg, "-np {}: must be in [1, 256]", h.n_slots);
  if (h.queue_max < 0 || h.queue_max > 65536)
    fail(ErrorKind::invalid_arg, "--queue {}: must be in [0, 65536]", h.queue_max);
  if (max_body < 1024)
    fail(ErrorKind::invalid_arg, "--max-body {}: must be at least 1024 bytes", max_body);
  if (h.timeout_s < 1) fail(ErrorKind::invalid_arg, "-to {}: must be >= 1 second", h.timeout_s);
  if (h.defaults.n_predict < -1 || h.defaults.n_predict == 0)
    fail(ErrorKind::invalid_arg, "-n {}: must be -1 or >= 1", h.defaults.n_predict);
  if (h.grace_s < 0) fail(ErrorKind::invalid_arg, "--shutdown-grace {}: must be >= 0", h.grace_s);
  if (h.ping_ms < 50)
    fail(ErrorKind::invalid_arg, "--ping-interval {}: must be >= 50 ms", h.ping_ms);
  h.max_body_bytes = static_cast<size_t>(max_body);
  h.defaults.sampling = sp;
  (void)Sampler(sp);  // the defaults must be valid (NaN, repeat penalty <= 0)
  h.model_path = ma.model;

  server::block_stop_signals();  // before any thread exists (the context fit may start TBB's)
  ThreadLimit threads(ma.threads);
  SessionOptions session = session_options(ma);
  cfg.n_batch = ma.batch;
  cfg.session = session;
  apply_prompt_cache_args(cache_args, cfg);
  session.prompt_cache = cfg.session.prompt_cache;
  // The slots' total context, known before loading: the offload plan must hold it. Only a -c is
  // the user's; the default (what host memory holds) is the load's default context, which fitting
  // a card may shrink (runtime/engine/fit.hpp), and the slots share what the load settled on.
  {
    const gguf::File f = gguf::File::open(ma.model);
    const ModelConfig c = read_config(f);
    // Before the port is bound: a template that does not parse stops the server at once.
    h.chat = load_chat_format(f, chat_args);
    h.force_tokens_file = forced_tokens_file("ferry serve");
    cfg.n_ctx_total = ma.ctx;
    if (ma.ctx == 0) ma.run.options.default_ctx = server::default_serve_context(c, h.n_slots, session);
  }
  Observability obs(ma.run.options.observe);
  return server::run_server(
      cfg, [&] { return load_observed(ma, obs, session); },
      [&](LoadedModel& m) {
        print_offload_stats(m);  // --offload-stats
        obs.finish();            // --stats, --trace, --record-profile, --record-routing
      });
}

}  // namespace

FERRY_COMMAND("serve",
              "OpenAI-compatible HTTP server (llama-server's conventions, offload metrics)",
              serve_main);

}  // namespace ferry::cli
