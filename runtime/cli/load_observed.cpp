#include "runtime/cli/load_observed.hpp"

namespace ferry::cli {

std::unique_ptr<LoadedModel> load_observed(const ModelArgs& ma, Observability& obs,
                                           const SessionOptions& session, DebugHook dump) {
  auto model = load_model_verbose(ma.model, /*allow_default=*/true, run_options(ma.run.options, obs, session));
  obs.attach(*model, std::move(dump));
  return model;
}

}  // namespace ferry::cli
