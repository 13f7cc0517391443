#include "kernels/cuda/launch_count.hpp"

#include <atomic>

#if defined(FERRY_CUDA_EMU)
#include "ferry_emu_counters.h"
#endif

namespace ferry::cuda {

#if defined(FERRY_CUDA_EMU)
// The emulator counts what it runs, graph nodes included; launch() is its own there.
uint64_t kernels_launched() { return ferry_emu::api_counts().kernels; }
#else
namespace detail {
std::atomic<uint64_t> launch_calls{0};
}  // namespace detail
uint64_t kernels_launched() { return detail::launch_calls.load(std::memory_order_relaxed); }
#endif

}  // namespace ferry::cuda
