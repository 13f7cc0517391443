#include "runtime/cli/load_observed.hpp"

namespace ferry::cli {

std::unique_ptr<LoadedModel> load_observed(const ModelArgs& ma, const OffloadArgs& offload, Observability& obs,
                                           const SessionOptions& session, DebugHook dump) {
  auto model = load_model_verbose(ma.model, /*allow_default=*/true, moe_options(offload, obs, session),
                                  backend_options(offload.device, offload.vram, ma.backend));
  obs.attach(*model, std::move(dump));
  return model;
}

}  // namespace ferry::cli
