#pragma once
// The CUDA device: cudaMalloc'd memory under a hard budget, non-blocking streams, events,
// cudaMemcpyAsync copies, cudaMallocHost / cudaHostRegister pinned memory with pageable fallback.
// In a build without CUDA, make_cuda_device throws ErrorKind::unsupported and the count is 0.
#include <cstdint>
#include <memory>

#include "runtime/backend/device.hpp"

namespace ferry {

// CUDA devices usable here (0 without a driver, a GPU, or CUDA support in the build).
int cuda_device_count();
std::unique_ptr<Device> make_cuda_device(const DeviceOptions& options);

// A Stream over an existing cudaStream_t of `dev` (e.g. cuda_ops_stream), for code that mixes the
// Device interface (copies, events) with work another component enqueues on that stream. The
// stream is not destroyed with the view. ErrorKind::invalid_arg when dev is not a cuda Device.
std::unique_ptr<Stream> cuda_stream_view(Device& dev, void* stream);

// cudaMemGetInfo of the current device: free and total bytes (tests and reports compare the
// process's real use against the budget). Throws when there is no CUDA device.
struct CudaMemInfo {
  uint64_t free_bytes = 0, total_bytes = 0;
};
CudaMemInfo cuda_mem_info();

}  // namespace ferry
