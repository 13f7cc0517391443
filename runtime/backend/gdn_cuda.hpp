#pragma once
// The Gated DeltaNet ops (runtime/model/qwen35moe_gdn_ops.hpp) on a CudaOps: the kernels of
// kernels/cuda/deltanet.cuh enqueued on the CudaOps stream, so they run in call order with the
// backend's other ops. make_gdn_ops() (the model's dispatch) calls this for the "cuda" backend.
#include <cstdint>
#include <memory>

#include "runtime/backend/ops.hpp"

namespace ferry {

class GdnOps;

// `ops` must be a CudaOps (ErrorKind::invalid_arg otherwise) and outlive the result. In a build
// without CUDA: ErrorKind::unsupported.
std::unique_ptr<GdnOps> make_cuda_gdn_ops(Ops& ops);

// Device memory the cuda GdnOps allocates for prefill steps of up to n_batch tokens (the chunked
// delta rule's scratch; 0 when such steps take the recurrent kernel, or without CUDA). The
// offload plan reserves it: it is allocated at the first long prefill, after the plan's slots.
uint64_t cuda_gdn_scratch_bytes(int32_t n_k_heads, int32_t n_v_heads, int32_t head_dim, int64_t n_batch);

}  // namespace ferry
