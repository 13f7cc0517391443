#pragma once
// The CUDA emulator's API counters (tests only): what a test may assert about host
// synchronisation and copies, e.g. "one graph launch and no device→host copy but the logits per
// decoded token". Counted since the process started; take differences.
//   stream_syncs    cudaStreamSynchronize calls and synchronous copies (cudaMemcpy)
//   pageable_waits  asynchronous copies into pageable memory (they return when the data is
//                   there, as the driver's do)
//   event_syncs     cudaEventSynchronize calls
//   device_syncs    cudaDeviceSynchronize calls
//   d2h_copies      device→host copies executed (inside a launched graph too), and their bytes
//   graph_launches  cudaGraphLaunch calls
//   kernels         kernels run: eager launches and the kernel nodes of launched graphs (each
//                   node once per graph launch), cuBLAS GEMMs included
//   copies, memsets copy and memset operations run, eager or as graph nodes, apart from kernels
#include <cstdint>

namespace ferry_emu {

struct ApiCounts {
  uint64_t stream_syncs = 0, pageable_waits = 0, event_syncs = 0, device_syncs = 0;
  uint64_t d2h_copies = 0, d2h_bytes = 0;
  uint64_t graph_launches = 0;
  uint64_t kernels = 0, copies = 0, memsets = 0;
};

ApiCounts api_counts();

}  // namespace ferry_emu
