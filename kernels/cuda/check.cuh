#pragma once
// The one CUDA error scheme: every runtime call goes through FERRY_CUDA_CHECK, every kernel launch
// is followed by FERRY_CUDA_CHECK_LAUNCH. Failures throw ferry::Error (ErrorKind::device) naming the
// call, the CUDA error and file:line. Argument errors in launch functions throw ErrorKind::invalid_arg
// or unsupported through the helpers below (implemented in check.cpp, compiled by g++, because nvcc
// cannot compile fmt's format-string checks).
#include <cuda_runtime_api.h>

#include <string>

namespace ferry::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_invalid_arg(const std::string& what);
[[noreturn]] void throw_unsupported(const std::string& what);

// Throws invalid_arg "<op>: <what>" unless cond holds.
inline void require(bool cond, const char* op, const std::string& what) {
  if (!cond) throw_invalid_arg(std::string(op) + ": " + what);
}

// True when p is aligned to `bytes` (kernels use vector loads of that width).
inline bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) % bytes) == 0;
}

// Number of CUDA devices; 0 (not an error) when there is no driver or no GPU.
int device_count();

}  // namespace ferry::cuda

#define FERRY_CUDA_CHECK(call)                                                        \
  do {                                                                                \
    const cudaError_t ferry_cuda_err_ = (call);                                       \
    if (ferry_cuda_err_ != cudaSuccess)                                               \
      ::ferry::cuda::throw_cuda_error(ferry_cuda_err_, #call, __FILE__, __LINE__);    \
  } while (0)

// After a <<<...>>> launch: reports configuration errors (bad grid, too much shared memory) at
// once. Asynchronous faults surface at the next synchronising call, also through FERRY_CUDA_CHECK.
#define FERRY_CUDA_CHECK_LAUNCH(kernel_name)                                          \
  do {                                                                                \
    const cudaError_t ferry_cuda_err_ = cudaGetLastError();                           \
    if (ferry_cuda_err_ != cudaSuccess)                                               \
      ::ferry::cuda::throw_cuda_error(ferry_cuda_err_, "launch " kernel_name, __FILE__, __LINE__); \
  } while (0)
