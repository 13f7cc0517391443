#pragma once
// The one way kernels are launched: launch(kernel, grid, block, shared_bytes, stream, args...).
// Under nvcc it is the <<<...>>> launch (cudaLaunchKernelEx with programmatic stream serialization
// under `--cuda-pdl`); in the CUDA emulator build (FERRY_CUDA=EMU, tests/cuda_emu) it queues the
// kernel on the emulated stream, which runs it on the host.
// Follow it with FERRY_CUDA_CHECK_LAUNCH (check.cuh) as after any launch.
#include <cuda_runtime_api.h>

// With the per-kernel timer on (kernel_times.hpp: `ferry bench --kernel-times`), each launch is
// bracketed by two CUDA events on its stream; off, the cost is one relaxed atomic load.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cuda/kernel_times.hpp"
#include "kernels/cuda/step_fold.hpp"

#if defined(FERRY_CUDA_EMU)
#include "tests/cuda_emu/emu.hpp"
#else
namespace ferry::cuda::detail {
// Every launch() call of the process, for kernels_launched() (launch_count.hpp, defined in
// launch_count.cpp): launches per decoded token is what fusing kernels lowers.
extern std::atomic<uint64_t> launch_calls;
// Programmatic dependent launch (set_pdl, launch_count.hpp): launches carry the programmatic
// stream serialization attribute, so a kernel's blocks may start while the previous kernel of the
// stream still runs; every kernel's first statement, FERRY_PDL_WAIT(), waits for that kernel to
// finish (and its writes to be visible) before anything else.
extern std::atomic<bool> pdl_launches;
}  // namespace ferry::cuda::detail
#endif

namespace ferry::cuda {

template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   A&&... args) {
  if (detail::StepFold* f = detail::step_fold) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    f->value(reinterpret_cast<const void*>(kernel));
    f->value(grid);
    f->value(block);
    f->value(shared_bytes);
    f->value(stream);
    (detail::fold_argument<P>(*f, args), ...);
    ++f->kernels;
    if (!f->launch) return;
  }
  const bool timed = detail::kernel_times_on.load(std::memory_order_relaxed);
  const size_t slot = timed ? detail::time_launch_begin(reinterpret_cast<const void*>(kernel), stream)
                            : detail::kUntimed;
#if defined(FERRY_CUDA_EMU)
  ::ferry_emu::launch(kernel, grid, block, shared_bytes, stream, std::forward<A>(args)...);
#else
  detail::launch_calls.fetch_add(1, std::memory_order_relaxed);
  if (detail::pdl_launches.load(std::memory_order_relaxed)) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shared_bytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // Errors surface as after <<<>>>: through cudaGetLastError (FERRY_CUDA_CHECK_LAUNCH).
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  } else {
    kernel<<<grid, block, shared_bytes, stream>>>(std::forward<A>(args)...);
  }
#endif
  if (slot != detail::kUntimed) detail::time_launch_end(slot, stream);
}
}  // namespace ferry::cuda

#if !defined(FERRY_CUDA_EMU)
// `extern __shared__ T name[]`: the block's dynamic shared memory, as a T*.
#define FERRY_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
// The emulator checks pointers kernels read from device tables; nothing on a GPU.
#define FERRY_EMU_CHECK_DEVICE_POINTER(p, what) ((void)0)
// The first statement of every kernel (tests/layers/check_kernels.py holds it): under programmatic
// dependent launch, wait until the stream's previous kernel has finished, then let the stream's
// next kernel be scheduled (its blocks fill the SMs this kernel leaves free and wait in their own
// FERRY_PDL_WAIT for this one to finish: its launch latency overlaps this kernel's run). Without
// the launch attribute (or below sm_90) both return at once.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FERRY_PDL_WAIT() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define FERRY_PDL_WAIT() ((void)0)
#endif
#else
// The emulator runs a stream's kernels one after another: nothing to wait for.
#define FERRY_PDL_WAIT() ((void)0)
#endif
