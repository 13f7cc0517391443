#pragma once
// CudaOps and CpuOps side by side for the op-by-op GPU tests: a CUDA device with a budget, the
// two backends, and typed uploads and downloads of device buffers.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"

namespace ferry::gputest {

struct Backends {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Ops> gpu;
  CpuOps cpu;
  explicit Backends(uint64_t budget_bytes = 2ull << 30) {
    DeviceOptions o;
    o.budget_bytes = budget_bytes;
    dev = make_device(DeviceKind::cuda, o);
    gpu = make_cuda_ops(*dev);
  }
  template <typename T>
  DeviceBuffer up(const std::vector<T>& h) {
    DeviceBuffer b = gpu->alloc(h.size() * sizeof(T));
    gpu->to_device(b.data(), h.data(), h.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> down(const DeviceBuffer& b, size_t n) {
    std::vector<T> h(n);
    gpu->to_host(h.data(), b.data(), n * sizeof(T));
    return h;
  }
};

}  // namespace ferry::gputest
