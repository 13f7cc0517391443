#pragma once
// Kernels this process has launched, for `ferry bench`'s launches per decoded token (fusing
// kernels lowers it; docs/options.md). Plain C++: host code that cannot include launch.cuh reads it.
//  - On a GPU: launch() calls (launch.cuh). Inside a stream capture a call records a graph node
//    instead of running it, and each launch of a graph recorded that way follows its recording;
//    a replayed graph (runtime/backend/cuda_step_graphs.cpp) adds its kernels itself
//    (count_graph_kernels), so the count is the kernels that ran there too.
//  - On the CUDA emulator (tests/cuda_emu): the kernels it ran, eager or as nodes of a launched
//    graph (each node once per graph launch), cuBLAS GEMMs included.
#include <cstdint>

namespace ferry::cuda {

uint64_t kernels_launched();
// A replayed step graph's kernels (runtime/backend/cuda_ops.cpp launches it without launch()
// calls): counted on a GPU; the emulator counts the nodes it runs by itself.
void count_graph_kernels(uint64_t n);

// Programmatic dependent launch for every launch() from now on (`--cuda-pdl`, CudaOpsOptions::pdl):
// on when `on` and the current device is sm_90 or newer. Returns whether it is on. Process-wide, like
// the launches it changes. The emulator ignores it (its kernels run one after another anyway) but
// reports it as asked, so the switch is tested there.
bool set_pdl(bool on);
bool pdl_enabled();

}  // namespace ferry::cuda
