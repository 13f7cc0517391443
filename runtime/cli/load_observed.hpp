#pragma once
// The model load that run, chat and logits share: the backend from --device/--vram, the MoE
// options from the offload and observability flags (the engine builds the executor and its
// observers), then --trace's op hook attached.
#include <memory>

#include "runtime/cli/common_args.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/cli/offload_report.hpp"

namespace ferry::cli {

std::unique_ptr<LoadedModel> load_observed(const ModelArgs& ma, Observability& obs,
                                           const SessionOptions& session, DebugHook dump = {});

}  // namespace ferry::cli
