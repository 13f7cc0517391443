#include "runtime/cli/offload_report.hpp"

#include <cstdio>

#include "offload/offload_executor.hpp"
#include "runtime/backend/cuda_ops.hpp"

namespace ferry::cli {

void print_offload_stats(LoadedModel& m) {
  m.moe().finish();
  OffloadExecutor* ex = m.moe().offload();
  if (!m.moe().options().offload.stats || !ex) return;
  std::fputs(offload_stats_text(ex->stats()).c_str(), stderr);
  if (m.ops().kind() == BackendKind::cuda) {
    const CudaGraphStats g = cuda_ops_graph_stats(m.ops());
    std::fprintf(stderr, "offload: cuda graphs %s: %llu launched, %llu instantiated%s\n", g.enabled ? "on" : "off",
                 static_cast<unsigned long long>(g.launches), static_cast<unsigned long long>(g.instantiations),
                 g.launches || !g.enabled
                     ? ""
                     : " (offloaded decode is recorded with --offload-decode table, or around its MoE steps "
                       "with --cuda-graphs segments)");
  }
}

}  // namespace ferry::cli
