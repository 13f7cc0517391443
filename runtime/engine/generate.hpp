#pragma once
// The generation loop (prompt → sample → decode → ...) and llama.cpp-style timing reports.
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine/engine.hpp"
#include "runtime/sampling/sampler.hpp"

namespace ferry {

enum class StopReason { eog, length, context, interrupted };
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int32_t n_predict = 128;   // tokens to generate at most (< 0: until EOG or the context is full)
  bool stop_at_eog = true;
  const std::atomic<bool>* interrupt = nullptr;  // set (e.g. by SIGINT) to stop after this token
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, in order; an EOG token ends the list but was not evaluated
  StopReason reason = StopReason::length;
  // True when the last token of `tokens` is in the session's tokens (evaluated). False after EOG or
  // when the length limit was hit right after sampling (as llama.cpp, the last token is not fed back).
  bool last_evaluated = false;
};

// Evaluates `prompt` (appended to what the session holds; every prompt token is also shown to the
// sampler's repetition history) and generates. on_token is called with each generated token
// (including a final EOG token). If the prompt is empty the session's last logits are used.
GenerateResult generate(Session& s, Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& o, const std::function<void(int32_t)>& on_token);

// Lines like llama.cpp's llama_perf_context_print (load, prompt eval, eval, total), for stderr.
std::string format_timings(const Timings& t, double load_ms, double total_ms);

}  // namespace ferry
