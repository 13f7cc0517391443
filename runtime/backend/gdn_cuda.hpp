#pragma once
// The Gated DeltaNet ops (runtime/backend/gdn_ops.hpp) on a CudaOps: the kernels of
// kernels/cuda/deltanet.cuh enqueued on the CudaOps stream, so they run in call order with the
// backend's other ops. CudaOps::make_gdn_ops() returns them.
#include <cstdint>
#include <memory>

#include "runtime/backend/gdn_ops.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

// `ops` must be a CudaOps (ErrorKind::invalid_arg otherwise) and outlive the result.
// long_batches: the delta rule's form for batches of cuda::kGdnChunkedMinTokens or more. In a
// build without CUDA: ErrorKind::unsupported.
std::unique_ptr<GdnOps> make_cuda_gdn_ops(Ops& ops, cpu::GdnPrefill long_batches);

// Device memory the cuda GdnOps allocates for prefill steps of up to n_batch tokens with the
// chunked delta rule (its scratch; 0 without CUDA) — an upper bound: with
// CudaOpsOptions::gdn_prefill = recurrent nothing is allocated. The offload plan reserves it: it
// is allocated at the first long prefill, after the plan's slots.
uint64_t cuda_gdn_scratch_bytes(int32_t n_k_heads, int32_t n_v_heads, int32_t head_dim, int64_t n_batch);

}  // namespace ferry
