#include "runtime/cli/prompt_cache_args.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "runtime/core/error.hpp"

namespace ferry::cli {

void add_prompt_cache_args(CLI::App& app, PromptCacheArgs& a) {
  app.add_option("--ctx-checkpoints", a.ctx_checkpoints,
                 "checkpoints of the recurrent (DeltaNet) state kept per slot for prompt reuse "
                 "(0: none; qwen35moe, qwen3next)")
      ->capture_default_str();
  app.add_option("--checkpoint-min-step", a.checkpoint_min_step,
                 "fewest tokens between two checkpoints of a slot")
      ->capture_default_str();
  app.add_option("--cache-ram", a.cache_ram_mib,
                 "MiB of host memory the checkpoints of all slots may hold, split between the "
                 "slots, oldest evicted (-1: no limit, 0: none) (-cram)")
      ->capture_default_str();
  app.add_option("--slot-prompt-similarity", a.slot_similarity,
                 "share of a request's prompt a free slot's cached tokens must match for the "
                 "request to go there; else the least recently used slot (0: off) (-sps)")
      ->capture_default_str();
}

void apply_prompt_cache_args(const PromptCacheArgs& a, server::ServeConfig& cfg) {
  if (a.ctx_checkpoints < 0)
    fail(ErrorKind::invalid_arg, "--ctx-checkpoints {}: must be >= 0", a.ctx_checkpoints);
  if (a.checkpoint_min_step < 1)
    fail(ErrorKind::invalid_arg, "--checkpoint-min-step {}: must be >= 1", a.checkpoint_min_step);
  if (a.cache_ram_mib < -1)
    fail(ErrorKind::invalid_arg, "--cache-ram {}: must be -1 (no limit), 0 (none) or MiB", a.cache_ram_mib);
  if (!(a.slot_similarity >= 0.0f && a.slot_similarity <= 1.0f))
    fail(ErrorKind::invalid_arg, "--slot-prompt-similarity {}: must be in [0, 1]", a.slot_similarity);
  PromptCacheOptions& p = cfg.session.prompt_cache;
  p.max_checkpoints = a.ctx_checkpoints;
  p.checkpoint_min_step = a.checkpoint_min_step;
  p.ram_bytes = a.cache_ram_mib < 0
                    ? std::numeric_limits<uint64_t>::max()
                    : (static_cast<uint64_t>(a.cache_ram_mib) << 20) /
                          static_cast<uint64_t>(std::max(cfg.http.n_slots, 1));
  cfg.slot_similarity = a.slot_similarity;
}

const char* prompt_cache_long_flag(const std::string& arg) {
  if (arg == "-sps") return "--slot-prompt-similarity";
  if (arg == "-cram") return "--cache-ram";
  return nullptr;
}

}  // namespace ferry::cli
