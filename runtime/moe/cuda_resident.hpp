#pragma once
// The MoE executor of a fully resident model on CUDA: every routed expert is uploaded once
// (through CudaOps::resident, so it is charged to the device budget) and each MoE step runs the
// grouped kernels of kernels/cuda/moe.cuh straight from the device-side routing (expert ids and
// weights that moe_route left in device memory). No host synchronisation per layer: the step is
// two kernel launches on the CudaOps stream (gate/up + SwiGLU, then down with the weighted sum).
//
// MoeStep pointers (x, expert_ids, expert_weights, out) are device memory of the same CudaOps, as
// the model forward passes its own buffers. Prefill uses the same grouped kernels (one warp per
// (row, token, slot)); tokens that share an expert read its rows through L2, not once per group as
// a per-expert GEMM would (docs/decisions/0005-cuda-ops.md).
//
// Observers get the routing from a device routing log (routing_log.hpp): two more device copies
// per step on the stream and one asynchronous device→host copy per forward step, so a decoded
// token stays one CUDA graph launch with --stats.
#include <memory>
#include <vector>

#include "runtime/moe/step.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

// `ops` must be a CudaOps (ErrorKind::invalid_arg otherwise) and outlive the executor. Uploads the
// experts of every layer now; ErrorKind::budget when they do not fit the device budget,
// ErrorKind::unsupported for gate and up of different types or experts that are not contiguous.
std::unique_ptr<MoeExecutor> make_cuda_resident_executor(
    Ops& ops, const std::vector<MoeLayerWeights>& layers);

}  // namespace ferry
