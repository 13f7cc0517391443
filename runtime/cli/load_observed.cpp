#include "runtime/cli/load_observed.hpp"

namespace ferry::cli {

std::unique_ptr<LoadedModel> load_observed(const ModelArgs& ma, Offload& offload, Observability& obs) {
  auto model = load_model_verbose(
      ma.model, /*allow_default=*/true, offload.wrap(obs.wrap(), obs.tracer()),
      backend_options(offload.args().device, offload.args().vram, offload.active(), ma.backend));
  obs.attach(*model);
  offload.attach(obs.counters());
  return model;
}

}  // namespace ferry::cli
