// The CUDA DeviceExpertKernels: kernels/cuda/moe.cuh over a per-step table of device pointers.
#include "offload/device_experts.hpp"
#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/ops.cuh"

namespace ferry {
namespace {

static_assert(sizeof(ExpertPtrs3) == sizeof(cuda::ExpertPtrs) && alignof(ExpertPtrs3) == alignof(cuda::ExpertPtrs),
              "the offload slot table is read by the CUDA kernels as cuda::ExpertPtrs");

class CudaExpertKernels final : public DeviceExpertKernels {
 public:
  explicit CudaExpertKernels(Device& dev) : dev_(dev) {}

  void experts(const ExpertShape& s, const ExpertPtrs3* table, const int32_t* ids, const float* weights,
               int64_t n_tokens, int32_t k, const float* x, float* y, bool accumulate, Stream& stream) override {
    if (s.gate_type != s.up_type)
      fail(ErrorKind::unsupported, "cuda experts: gate ({}) and up ({}) of different types", type_name(s.gate_type),
           type_name(s.up_type));
    auto st = static_cast<cudaStream_t>(stream.native_handle());
    const size_t h_bytes =
        static_cast<size_t>(n_tokens) * static_cast<size_t>(k) * static_cast<size_t>(s.n_ff) * sizeof(float);
    if (h_bytes > h_.bytes()) {
      stream.synchronize();  // queued kernels may still read the old scratch
      h_ = DeviceBuffer();
      h_ = dev_.alloc(h_bytes, "offload expert scratch");
    }
    const auto* t = reinterpret_cast<const cuda::ExpertPtrs*>(table);
    cuda::moe_gate_up_swiglu(s.gate_type, t, ids, n_tokens, k, s.n_embd, s.n_ff, x, h_.f32(), st);
    cuda::moe_down(s.down_type, t, ids, weights, n_tokens, k, s.n_embd, s.n_ff, h_.f32(), y, accumulate, st);
  }

  void add(float* y, const float* b, int64_t n, Stream& stream) override {
    cuda::add(y, b, y, n, static_cast<cudaStream_t>(stream.native_handle()));
  }

 private:
  Device& dev_;
  DeviceBuffer h_;
};

}  // namespace

std::unique_ptr<DeviceExpertKernels> make_cuda_expert_kernels(Device& dev) {
  if (dev.kind() != DeviceKind::cuda)
    fail(ErrorKind::invalid_arg, "cuda expert kernels on a {} device", device_kind_name(dev.kind()));
  return std::make_unique<CudaExpertKernels>(dev);
}

}  // namespace ferry

#else

namespace ferry {

std::unique_ptr<DeviceExpertKernels> make_cuda_expert_kernels(Device&) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}

}  // namespace ferry

#endif
