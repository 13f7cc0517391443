// `ferry chat`: interactive multi-turn chat through the model's chat template (or
// --chat-template-file), with its reasoning shown as llama-cli shows it (--hide-reasoning: only
// the answer). The KV cache is kept between turns (only the new tokens of each turn are
// evaluated, unless the template rewrote earlier turns). /reset starts over, /quit or EOF (Ctrl-D) exits, Ctrl-C stops
// the current reply and keeps the conversation. Works with stdin from a pipe (no prompts shown).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "runtime/cli/chat_args.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/load_observed.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/cli/offload_report.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/chat.hpp"
#include "runtime/engine/threads.hpp"

namespace ferry::cli {
namespace {

// The reply as it streams: the reasoning between "<think>" and "</think>" lines, as llama-cli
// shows it (or not at all), then the answer.
class ReasoningPrinter {
 public:
  explicit ReasoningPrinter(bool hide) : hide_(hide) {}
  void print(const chat::ChatDelta& d) {
    if (!d.reasoning_content.empty() && !hide_) {
      if (!in_reasoning_) write("<think>\n");
      in_reasoning_ = true;
      write(d.reasoning_content);
    }
    if (!d.content.empty()) {
      if (in_reasoning_) write("\n</think>\n\n");
      in_reasoning_ = false;
      write(d.content);
    }
  }
  void finish() {  // a reply that ended inside its reasoning
    if (in_reasoning_) write("\n</think>");
    in_reasoning_ = false;
  }

 private:
  static void write(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  bool hide_;
  bool in_reasoning_ = false;
};

int chat_main(int argc, char** argv) {
  CLI::App app{"Interactive chat (the model's chat template); /reset, /quit, Ctrl-C stops a reply, Ctrl-D exits", "ferry chat"};
  ModelArgs ma;
  SamplingParams sp;
  std::string system_prompt;
  int32_t n_predict = -1;
  bool timings = false;
  bool hide_reasoning = false;
  ChatFormatArgs chat_args;
  add_model_args(app, ma);
  add_sampling_args(app, sp);
  add_chat_format_args(app, chat_args);
  app.add_flag("--hide-reasoning", hide_reasoning,
               "print only the answer, not the model's <think> reasoning (shown by default, as "
               "llama-cli)");
  app.add_option("-n,--n-predict", n_predict, "tokens per reply at most (-1: until end of turn)")->capture_default_str();
  app.add_option("--system-prompt", system_prompt, "system message (-sys)");
  app.add_flag("--timings", timings, "print timings after each reply");
  bool stop = false;
  const int rc = parse(app, argc, argv, stop);
  if (stop) return rc;
  if (n_predict < -1) fail(ErrorKind::invalid_arg, "-n {}: must be >= -1", n_predict);

  ThreadLimit threads(ma.threads);
  Observability obs(ma.run.options.observe);
  auto model = load_observed(ma, obs, session_options(ma));
  const Tokenizer& tok = model->tokenizer();
  ChatFormat format = load_chat_format(model->file(), chat_args);
  set_special_texts(format, tok);
  if (const std::string forced = forced_tokens_file("ferry chat"); !forced.empty())
    sp.forced_tokens = read_forced_tokens(forced, tok);
  Session session(*model, session_options(ma));
  Sampler sampler(sp);
  Chat chat(session, sampler, format, system_prompt);
  const bool interactive = isatty(STDIN_FILENO);
  std::fprintf(stderr, "ferry chat: context %lld, threads %d, seed %llu. /reset starts over, /quit exits.\n",
               static_cast<long long>(session.n_ctx()), threads.threads(),
               static_cast<unsigned long long>(sampler.seed()));

  SigintFlag sigint;
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) {
      if (sigint.raised() && interactive) {  // Ctrl-C at the prompt: leave like llama.cpp does
        std::fputc('\n', stdout);
      }
      break;  // EOF (Ctrl-D) or interrupted read
    }
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      chat.reset();
      std::fprintf(stderr, "ferry chat: conversation reset\n");
      continue;
    }
    if (line.empty()) continue;
    sigint.clear();
    GenerateOptions go;
    go.n_predict = n_predict;
    go.interrupt = &sigint.flag();
    const Timings before = session.timings();
    GenerateResult r;
    ReasoningPrinter out(hide_reasoning);
    try {
      r = chat.turn(line, go, [&](const chat::ChatDelta& d) { out.print(d); });
    } catch (const Error& e) {
      // A turn that does not fit, or one the template refuses: the conversation goes on.
      if (e.kind() != ErrorKind::context && e.kind() != ErrorKind::invalid_arg) throw;
      std::fprintf(stderr, "ferry chat: %s\n", e.what());
      continue;
    }
    out.finish();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (r.reason == StopReason::interrupted) std::fprintf(stderr, "ferry chat: reply stopped\n");
    if (r.reason == StopReason::context) std::fprintf(stderr, "ferry chat: context full; /reset to start over\n");
    sigint.clear();
    if (chat.last_turn_reprocessed())
      std::fprintf(stderr, "ferry chat: the template rewrote earlier turns: conversation re-evaluated\n");
    if (timings) {
      const Timings& t = session.timings();
      std::fprintf(stderr, "ferry chat: prompt %lld tokens in %.1f ms, %lld tokens generated in %.1f ms (%.2f tok/s), %lld in context\n",
                   static_cast<long long>(t.prompt_tokens - before.prompt_tokens), t.prompt_ms - before.prompt_ms,
                   static_cast<long long>(t.eval_runs - before.eval_runs), t.eval_ms - before.eval_ms,
                   t.eval_ms > before.eval_ms ? 1e3 * static_cast<double>(t.eval_runs - before.eval_runs) / (t.eval_ms - before.eval_ms) : 0.0,
                   static_cast<long long>(session.n_past()));
    }
  }
  print_offload_stats(*model);
  obs.finish();
  return 0;
}

}  // namespace

FERRY_COMMAND("chat", "interactive multi-turn chat (the model's chat template), KV cache kept between turns", chat_main);

}  // namespace ferry::cli
