#pragma once
// The model load that run and chat share: the engine backend from --device/--vram, the offload
// executor (when active) wrapped by the observability chain, then --stats/--trace attached.
#include <memory>

#include "runtime/cli/common_args.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/cli/offload_args.hpp"

namespace ferry::cli {

std::unique_ptr<LoadedModel> load_observed(const ModelArgs& ma, Offload& offload, Observability& obs);

}  // namespace ferry::cli
