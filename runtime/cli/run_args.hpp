#pragma once
// The flags that shape a model run — device and budget, the offload engine, the backend switches,
// routing and observability (docs/options.md lists each with its default) — registered in one
// place and parsed straight into the engine's typed RunOptions (runtime/engine/run_options.hpp).
// run, chat, logits and perplexity take them all; ferry bench takes the groups that make sense
// per load through the sweep adapter: its sweepable flags (--device, --vram, --routing,
// --offload-decode) collect comma-separated lists, and each point of the sweep is applied to a
// copy of the options through the same parser (apply_sweep).
#include <CLI/CLI.hpp>
#include <array>
#include <string>
#include <vector>

#include "runtime/engine/run_options.hpp"

namespace ferry::cli {

// "a,b" values given once or repeated (-m a -m b), in order, without duplicates.
std::vector<std::string> split_list(const std::vector<std::string>& in);

enum class SweepFlag { device, vram, routing, decode };
inline constexpr int kSweepFlags = 4;

class RunArgs {
 public:
  // --device defaults to auto: cuda when a GPU exists (default_device_kind), else cpu; resolved
  // when add_all's parse ends without a --device (a given device never counts the GPUs).
  RunArgs();
  RunOptions options;  // what the flags set (defaults: RunOptions', the device once parsed)

  // Every run flag, each value parsed when CLI11 reads it (bad values fail the parse, naming
  // the flag).
  void add_all(CLI::App& app);
  // ferry bench: the device, offload-engine, routing and backend flags; the sweepable ones as
  // comma-separated lists (sweep()), the others into `options` as above. Per-run outputs
  // (--print-plan, --plan-json, --record-profile, --offload-stats, --record-routing, --stats,
  // --trace) are not registered.
  void add_sweep(CLI::App& app);
  // The values given to a sweepable flag (split at commas, duplicates dropped, in order); empty
  // when the flag was not given.
  std::vector<std::string> sweep(SweepFlag f) const;

  // One value of a sweepable flag applied to o, through the flag's own parser ("none" for --vram:
  // no budget).
  static void apply_sweep(SweepFlag f, const std::string& value, RunOptions& o);

 private:
  void add(CLI::App& app, bool sweep);
  std::array<std::vector<std::string>, kSweepFlags> sweep_;
};

}  // namespace ferry::cli
