// `ferry run`: load a model, evaluate a prompt, stream the generated text, print timings.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/load_observed.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/cli/offload_report.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/engine/threads.hpp"

namespace ferry::cli {
namespace {

constexpr const char* kDefaultPrompt = "Once upon a time";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "cannot read the prompt file {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_main(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt (without -m: a built-in synthetic model)", "ferry run"};
  ModelArgs ma;
  SamplingParams sp;
  std::string prompt, prompt_file, system_prompt, token_list;
  int32_t n_predict = 128;
  bool chat = false, no_chat = false, no_display_prompt = false, print_ids = false;
  add_model_args(app, ma);
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("-f,--file", prompt_file, "read the prompt from a file");
  app.add_option("--tokens", token_list, "prompt as token ids (1,2,3) instead of text");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (-1: until end of generation or a full context)")
      ->capture_default_str();
  add_sampling_args(app, sp);
  app.add_flag("--chat", chat, "wrap the prompt in the ChatML template (user turn + assistant header)");
  app.add_flag("--no-chat-template", no_chat, "use the prompt as raw text (default)");
  app.add_option("--system-prompt", system_prompt, "system message for --chat (-sys)");
  app.add_flag("--no-display-prompt", no_display_prompt, "do not echo the prompt");
  app.add_flag("--print-ids", print_ids, "print the generated token ids on stderr at the end");
  bool stop = false;
  const int rc = parse(app, argc, argv, stop);
  if (stop) return rc;
  if (int{!prompt.empty()} + int{!prompt_file.empty()} + int{!token_list.empty()} > 1)
    fail(ErrorKind::invalid_arg, "give at most one of -p, -f and --tokens");
  if (chat && no_chat) fail(ErrorKind::invalid_arg, "--chat and --no-chat-template exclude each other");
  if (n_predict < -1) fail(ErrorKind::invalid_arg, "-n {}: must be >= -1", n_predict);

  const auto t_start = std::chrono::steady_clock::now();
  ThreadLimit threads(ma.threads);
  Observability obs(ma.run.options.observe);
  auto model = load_observed(ma, obs, session_options(ma));
  const Tokenizer& tok = model->tokenizer();
  Session session(*model, session_options(ma));

  std::vector<int32_t> tokens;
  std::string shown;
  if (!token_list.empty()) {
    tokens = parse_token_list(token_list);
    shown = tok.decode(tokens, true);
  } else {
    std::string text = !prompt_file.empty() ? read_file(prompt_file) : prompt;
    if (prompt.empty() && prompt_file.empty()) {
      text = kDefaultPrompt;
      std::fprintf(stderr, "ferry: no prompt given (-p): using \"%s\"\n", kDefaultPrompt);
    }
    if (chat) {
      std::vector<ChatMessage> msgs;
      if (!system_prompt.empty()) msgs.push_back({"system", system_prompt});
      msgs.push_back({"user", text});
      text = format_chatml(msgs, true);
    }
    tokens = tok.encode(text, /*add_bos=*/true, /*parse_special=*/true);
    shown = text;
  }
  if (tokens.empty()) fail(ErrorKind::invalid_arg, "the prompt has no tokens");
  const int64_t n_ctx = session.n_ctx(), n_prompt = static_cast<int64_t>(tokens.size());
  // llama.cpp keeps 4 positions of room after the prompt and refuses longer prompts.
  if (n_prompt > n_ctx - 4)
    fail(ErrorKind::context, "prompt is too long ({} tokens, max {} with -c {})", n_prompt, n_ctx - 4, n_ctx);
  if (n_predict > n_ctx - n_prompt) {
    std::fprintf(stderr, "ferry: warning: -n %d does not fit in the context (%lld prompt tokens, -c %lld): generating at most %lld\n",
                 n_predict, static_cast<long long>(n_prompt), static_cast<long long>(n_ctx),
                 static_cast<long long>(n_ctx - n_prompt));
    n_predict = static_cast<int32_t>(n_ctx - n_prompt);
  }
  Sampler sampler(sp);
  std::fprintf(stderr, "ferry: context %lld, prompt %lld tokens, threads %d, seed %llu, KV cache %s/%s (%.1f MiB)\n",
               static_cast<long long>(n_ctx), static_cast<long long>(n_prompt), threads.threads(),
               static_cast<unsigned long long>(sampler.seed()), ma.cache_type_k.c_str(), ma.cache_type_v.c_str(),
               static_cast<double>(session.state_bytes()) / (1024.0 * 1024.0));
  if (!no_display_prompt) {
    std::fputs(shown.c_str(), stdout);
    std::fflush(stdout);
  }

  SigintFlag sigint;
  TextStream stream(tok);
  GenerateOptions go;
  go.n_predict = n_predict;
  go.interrupt = &sigint.flag();
  const GenerateResult r = generate(session, sampler, tokens, go, [&](int32_t id) {
    const std::string piece = stream.push(id);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  const std::string rest = stream.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  if (r.reason != StopReason::length) std::fprintf(stderr, "ferry: stopped: %s\n", stop_reason_name(r.reason));
  if (print_ids) {
    std::string ids;
    for (int32_t id : r.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    std::fprintf(stderr, "ferry: generated ids: %s\n", ids.c_str());
  }
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  std::fputs(format_timings(session.timings(), model->load_ms(), total_ms).c_str(), stderr);
  print_offload_stats(*model);
  obs.finish();
  return 0;
}

}  // namespace

FERRY_COMMAND("run", "generate text from a prompt (llama-cli style)", run_main);

}  // namespace ferry::cli
