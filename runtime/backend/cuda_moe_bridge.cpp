#include "runtime/backend/cuda_moe_bridge.hpp"

#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <chrono>
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.cuh"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {
namespace {

class CudaMoeBridge final : public MoeWrapper {
 public:
  CudaMoeBridge(Ops& ops, std::unique_ptr<MoeExecutor> inner)
      : MoeWrapper(std::move(inner)), dev_(cuda_ops_device(ops)), s_(static_cast<cudaStream_t>(cuda_ops_stream(ops))) {
    if (!inner_) fail(ErrorKind::internal, "cuda moe bridge without an executor");
  }

  // An inner executor that takes device routing (the offload engine's decode from device tables)
  // gets the forward's request as it is: no copy, no synchronisation, and the step can be recorded.
  bool capturable() const override { return inner_->device_routing(1) && inner_->capturable(); }

  void run(const MoeRequest& req) override {
    if (req.device) fail(ErrorKind::internal, "cuda moe bridge: the request was bridged already");
    if (req.n_tokens <= 0 || inner_->device_routing(req.n_tokens)) return inner_->run(req);
    const size_t nx = static_cast<size_t>(req.n_tokens) * static_cast<size_t>(req.n_embd);
    const size_t nk = static_cast<size_t>(req.n_tokens) * static_cast<size_t>(req.top_k);
    const size_t bytes = (nx + 2 * nk) * 4;
    if (bytes > host_.bytes()) {
      // Copies into this buffer completed at the last synchronisation below; copies out of it
      // (an inner executor uploading the routing) may still be queued.
      FERRY_CUDA_CHECK(cudaStreamSynchronize(s_));
      host_ = HostBuffer();
      host_ = dev_.alloc_host(bytes * 2, /*pinned=*/true);
    }
    auto* x = static_cast<float*>(host_.data());
    auto* ids = reinterpret_cast<int32_t*>(x + nx);
    auto* w = reinterpret_cast<float*>(ids + nk);
    FERRY_CUDA_CHECK(cudaMemcpyAsync(x, req.x, nx * 4, cudaMemcpyDeviceToHost, s_));
    FERRY_CUDA_CHECK(cudaMemcpyAsync(ids, req.expert_ids, nk * 4, cudaMemcpyDeviceToHost, s_));
    FERRY_CUDA_CHECK(cudaMemcpyAsync(w, req.expert_weights, nk * 4, cudaMemcpyDeviceToHost, s_));
    FERRY_CUDA_CHECK(cudaStreamSynchronize(s_));
    const MoeDeviceIo io{req.x, req.expert_ids, req.expert_weights,
                         std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count()};
    MoeRequest h = req;
    h.x = x;
    h.expert_ids = ids;
    h.expert_weights = w;
    h.device = &io;
    inner_->run(h);
  }

 private:
  Device& dev_;
  cudaStream_t s_;
  HostBuffer host_;
};

}  // namespace

std::unique_ptr<MoeExecutor> make_cuda_moe_bridge(Ops& ops, std::unique_ptr<MoeExecutor> inner) {
  return std::make_unique<CudaMoeBridge>(ops, std::move(inner));
}

}  // namespace ferry

#else

namespace ferry {

std::unique_ptr<MoeExecutor> make_cuda_moe_bridge(Ops&, std::unique_ptr<MoeExecutor>) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}

}  // namespace ferry

#endif
