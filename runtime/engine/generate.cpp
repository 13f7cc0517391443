#include "runtime/engine/generate.hpp"

#include <chrono>

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace ferry {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::eog: return "end of generation";
    case StopReason::length: return "length limit";
    case StopReason::context: return "context full";
    case StopReason::interrupted: return "interrupted";
  }
  return "?";
}

GenerateResult generate(Session& s, Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& o, const std::function<void(int32_t)>& on_token) {
  GenerateResult res;
  if (!prompt.empty()) {
    s.eval(prompt);
    for (int32_t t : prompt) sampler.accept(t);
  } else if (s.n_past() == 0) {
    fail(ErrorKind::invalid_arg, "generate: empty prompt and empty session");
  }
  const bool has_tok = s.model().has_tokenizer();
  for (int32_t i = 0; o.n_predict < 0 || i < o.n_predict; ++i) {
    if (o.interrupt && o.interrupt->load()) {
      res.reason = StopReason::interrupted;
      return res;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t tok = sampler.sample(s.last_logits());
    sampler.accept(tok);
    auto& tm = s.timings();
    tm.sample_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tm.sample_runs += 1;
    res.tokens.push_back(tok);
    res.last_evaluated = false;
    if (on_token) on_token(tok);
    if (o.stop_at_eog && has_tok && s.model().tokenizer().is_eog(tok)) {
      res.reason = StopReason::eog;
      return res;
    }
    if (o.n_predict >= 0 && i + 1 == o.n_predict) break;
    if (s.n_past() >= s.n_ctx()) {
      res.reason = StopReason::context;
      return res;
    }
    const int32_t one[1] = {tok};
    s.eval(one);
    res.last_evaluated = true;
  }
  res.reason = StopReason::length;
  return res;
}

std::string format_timings(const Timings& t, double load_ms, double total_ms) {
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto rate = [](double ms, int64_t n) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  std::string s;
  s += fmt::format("ferry: sampling time    = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:9.2f} tokens per second)\n",
                   t.sample_ms, t.sample_runs, per(t.sample_ms, t.sample_runs), rate(t.sample_ms, t.sample_runs));
  s += fmt::format("ferry: load time        = {:10.2f} ms\n", load_ms);
  s += fmt::format("ferry: prompt eval time = {:10.2f} ms / {:5} tokens ({:8.2f} ms per token, {:9.2f} tokens per second)\n",
                   t.prompt_ms, t.prompt_tokens, per(t.prompt_ms, t.prompt_tokens), rate(t.prompt_ms, t.prompt_tokens));
  s += fmt::format("ferry:        eval time = {:10.2f} ms / {:5} runs   ({:8.2f} ms per token, {:9.2f} tokens per second)\n",
                   t.eval_ms, t.eval_runs, per(t.eval_ms, t.eval_runs), rate(t.eval_ms, t.eval_runs));
  s += fmt::format("ferry:       total time = {:10.2f} ms / {:5} tokens\n", total_ms, t.prompt_tokens + t.eval_runs);
  return s;
}

}  // namespace ferry
