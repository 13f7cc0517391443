#pragma once
// The Gated DeltaNet ops (runtime/model/qwen35moe_gdn_ops.hpp) on a CudaOps: the kernels of
// kernels/cuda/deltanet.cuh enqueued on the CudaOps stream, so they run in call order with the
// backend's other ops. make_gdn_ops() (the model's dispatch) calls this for the "cuda" backend.
#include <memory>

#include "runtime/backend/ops.hpp"

namespace ferry {

class GdnOps;

// `ops` must be a CudaOps (ErrorKind::invalid_arg otherwise) and outlive the result. In a build
// without CUDA: ErrorKind::unsupported.
std::unique_ptr<GdnOps> make_cuda_gdn_ops(Ops& ops);

}  // namespace ferry
