#include "kernels/cuda/launch_count.hpp"

#include "kernels/cuda/step_fold.hpp"

#include <atomic>

#include <cuda_runtime_api.h>

#if defined(FERRY_CUDA_EMU)
#include "ferry_emu_counters.h"
#endif

namespace ferry::cuda {

namespace detail {
thread_local StepFold* step_fold = nullptr;
}  // namespace detail

#if defined(FERRY_CUDA_EMU)
// The emulator counts what it runs, graph nodes included; launch() is its own there.
uint64_t kernels_launched() { return ferry_emu::api_counts().kernels; }
void count_graph_kernels(uint64_t) {}
namespace {
std::atomic<bool> pdl_asked{false};
}  // namespace
bool set_pdl(bool on) {
  pdl_asked.store(on);
  return on;
}
bool pdl_enabled() { return pdl_asked.load(); }
#else
namespace detail {
std::atomic<uint64_t> launch_calls{0};
std::atomic<bool> pdl_launches{false};
}  // namespace detail
uint64_t kernels_launched() { return detail::launch_calls.load(std::memory_order_relaxed); }
void count_graph_kernels(uint64_t n) { detail::launch_calls.fetch_add(n, std::memory_order_relaxed); }
bool set_pdl(bool on) {
  int device = 0, major = 0;
  if (on && (cudaGetDevice(&device) != cudaSuccess ||
             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)) {
    (void)cudaGetLastError();
    major = 0;
  }
  const bool enabled = on && major >= 9;
  detail::pdl_launches.store(enabled);
  return enabled;
}
bool pdl_enabled() { return detail::pdl_launches.load(); }
#endif

}  // namespace ferry::cuda
