#pragma once
// Flags shared by the commands that run a model (run, chat, logits), with llama.cpp's names where
// the meaning is the same, and the helpers behind them (loading with progress, the default
// synthetic model, .npy output).
#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cli/run_args.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/sampling/sampler.hpp"

namespace ferry::cli {

struct ModelArgs {
  std::string model;          // -m; empty: the built-in synthetic model (where allowed)
  int threads = 0;            // -t; 0: physical cores
  int64_t ctx = 0;            // -c; 0: min(model context, 4096)
  int32_t batch = 512;        // -b
  std::string cache_type_k = "f16";  // -ctk
  std::string cache_type_v = "f16";  // -ctv
  RunArgs run;                       // device, budget, offload, backend, routing, observe
};

// The model flags; with_run: also every run flag (run_args.hpp: device, budget, offload engine,
// backend switches, routing, observability).
void add_model_args(CLI::App& app, ModelArgs& a, bool with_run = true);
void add_sampling_args(CLI::App& app, SamplingParams& p);

// CLI11 takes only one-letter short options; llama.cpp's -ctk/-ctv, -fit/-fitt/-fitc (and -sys) are
// rewritten to
// their long forms before parsing. Returns storage that argv points into.
std::vector<std::string> normalize_args(int argc, char** argv);
// Parses with CLI11; returns an exit code when the command should stop (help or a flag error).
int parse(CLI::App& app, int argc, char** argv, bool& stop);

SessionOptions session_options(const ModelArgs& a);
GgmlType parse_cache_type(const std::string& s, const char* flag);

// Loads with a progress line on stderr. An empty path (when allow_default) means the built-in
// synthetic model: made once in the cache directory ($XDG_CACHE_HOME/ferry or ~/.cache/ferry).
// run: the run's typed options (the engine derives the backend and the MoE executor from them).
std::unique_ptr<LoadedModel> load_model_verbose(std::string path, bool allow_default, const RunOptions& run = {});
std::string default_model_path();  // creates it when missing

// "1,2,3" → ids; ErrorKind::invalid_arg on junk.
std::vector<int32_t> parse_token_list(const std::string& s);

// float32 .npy (C order) with the given shape; ErrorKind::io on failure.
void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

// SIGINT as a flag: the first Ctrl-C sets it (a command stops what it is doing and cleans up);
// a second one while the flag is still set falls back to the default action (terminate).
class SigintFlag {
 public:
  SigintFlag();   // installs the handler (without SA_RESTART, so a blocked read returns)
  ~SigintFlag();  // restores the previous handler
  SigintFlag(const SigintFlag&) = delete;
  SigintFlag& operator=(const SigintFlag&) = delete;
  const std::atomic<bool>& flag() const;
  bool raised() const { return flag().load(); }
  void clear();
};

}  // namespace ferry::cli
