#pragma once
// The host bridge of a CUDA forward's MoE step. Executors that make host-side decisions (routing
// overrides, --stats, --record-routing, the offload engine) need the routing on the host; the
// bridge copies x, expert ids and weights into pinned host memory with one asynchronous copy each
// on the CudaOps stream and one synchronisation, then hands the inner executor a request whose x,
// expert_ids and expert_weights are those host copies, whose `out` is still device memory, and
// whose MoeRequest::device holds the device originals (offload/moe.hpp).
//
// The engine puts it in front of any wrapped executor chain on cuda; the unwrapped resident path
// (no decorators) has no bridge and no per-layer synchronisation. A request the inner executor
// takes with device routing (MoeExecutor::device_routing) passes through untouched.
#include <memory>

#include "offload/moe.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

// `ops` must be a CudaOps and outlive the bridge (ErrorKind::invalid_arg otherwise);
// ErrorKind::unsupported in a build without CUDA.
std::unique_ptr<MoeExecutor> make_cuda_moe_bridge(Ops& ops, std::unique_ptr<MoeExecutor> inner);

}  // namespace ferry
