#pragma once
// The backend's switches as flags (docs/options.md lists each with its default and what would
// decide it): registered by add_model_args (run, chat, logits) and by ferry bench, turned into
// the engine's BackendOptions by backend_options() (common_args.hpp).
#include <CLI/CLI.hpp>
#include <string>

#include "runtime/engine/engine.hpp"

namespace ferry::cli {

struct BackendArgs {
  std::string cuda_graphs = "off";  // --cuda-graphs on | off | segments
  bool cuda_int8_dot = false;      // --cuda-int8-dot
  std::string gdn_prefill =
      "auto";  // --gdn-prefill auto | chunked | recurrent (auto: the backend's)
  bool no_repack = false;  // --no-repack
};

void add_backend_args(CLI::App& app, BackendArgs& a);
// Sets b.cpu / b.cuda from the flags; "auto" keeps the backend's default. ErrorKind::invalid_arg
// on a value the flag checks did not see (callers that fill BackendArgs themselves).
void apply_backend_args(const BackendArgs& a, BackendOptions& b);

}  // namespace ferry::cli
