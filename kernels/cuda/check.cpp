#include "kernels/cuda/check.cuh"

#include "runtime/core/error.hpp"

namespace ferry::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Out-of-memory is a budget problem the user can act on, the rest are device failures.
  const ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::budget : ErrorKind::device;
  fail(kind, "CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err),
       call, file, line);
}

void throw_invalid_arg(const std::string& what) { fail(ErrorKind::invalid_arg, "cuda {}", what); }

void throw_unsupported(const std::string& what) { fail(ErrorKind::unsupported, "cuda {}", what); }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error for later calls
    return 0;
  }
  return n;
}

}  // namespace ferry::cuda
