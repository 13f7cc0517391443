#pragma once
// The prompt-reuse flags of `ferry serve` (llama-server's names and defaults): --ctx-checkpoints,
// --checkpoint-min-step, --cache-ram (-cram), --slot-prompt-similarity (-sps).
#include <CLI/CLI.hpp>

#include "runtime/server/serve.hpp"

namespace ferry::cli {

struct PromptCacheArgs {
  int32_t ctx_checkpoints = 8;
  int64_t checkpoint_min_step = 256;
  int64_t cache_ram_mib = 8192;  // all slots together; -1: no limit, 0: no checkpoints
  float slot_similarity = 0.1f;
};

void add_prompt_cache_args(CLI::App& app, PromptCacheArgs& a);
// Checks the values (ErrorKind::invalid_arg naming the flag) and sets them in cfg: the RAM bound
// is split evenly between the slots.
void apply_prompt_cache_args(const PromptCacheArgs& a, server::ServeConfig& cfg);
// llama-server's multi-letter short forms, for CLI11 (which takes one-letter ones): -sps, -cram.
const char* prompt_cache_long_flag(const std::string& arg);

}  // namespace ferry::cli
