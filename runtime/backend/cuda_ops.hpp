#pragma once
// CudaOps: the Ops interface (ops.hpp) on a CUDA Device, with the kernels of kernels/cuda. All
// ops are enqueued on one compute stream in call order; memory comes from the device's budgeted
// pool. Numerics differ from CpuOps where the GPU kernels do better than ggml's CPU shortcuts:
// activations stay float in quantized products (no Q8 activation quantization unless int8_dot
// is on), the attention query and probabilities stay float with an F16 cache. Quantized KV caches
// hold the CPU's bytes (the same rotation and quantizers); their attention follows the CPU's flash
// attention (rotated query rounded to vec_dot_type(K)) but accumulates V in float.
// tests/gpu/test_gpu_cuda_ops.cpp bounds the differences.
#include <cstdint>
#include <memory>

#include "kernels/cpu/gdn.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

struct CudaOpsOptions {
  // Scratch for the cuBLAS prefill path (dequantized weight chunks + half activations) and
  // split-K attention; charged to the device budget once, at construction.
  size_t matmul_workspace_bytes = 64ull << 20;
  size_t attention_workspace_bytes = 16ull << 20;
  bool use_cublas = true;  // false: tiled kernel for large batches
  // One-token steps as CUDA graphs (Ops::begin_graph; `--cuda-graphs on`; resident steps are
  // recorded once and replayed: cuda_step_graphs.hpp). Off by default: on the H200, 8 interleaved
  // resident decode runs gave kernel by kernel a median of 174.6 tok/s against 167.0 with graphs
  // when every token captured and updated the whole step
  // (bench/results/2026-12-04-gpu-check-h200-weight-types.md); replay is not measured on a GPU yet.
  bool graphs = false;
  // Also steps whose MoE executor synchronises with the host (offload, the host bridge, the
  // decorators): recorded as one graph per stretch between MoE steps. Off until measured on a GPU
  // (`--cuda-graphs segments`).
  bool graph_segments = false;
  // One-token matmuls of quantized weights (every type but F32/F16/BF16) through the integer
  // matvec (activations quantized to 8 bits, __dp4a; cuda::matvec_q8) using the matmul workspace.
  // Off until a GPU run shows it is faster (`--cuda-int8-dot`).
  bool int8_dot = false;
  // The fused decode step (kernels/cuda/README.md, "Fused decode"): several projections of one
  // input in one launch, the residual joins with the next norm, the DeltaNet step's small ops, the
  // resident MoE's down + sum, an attention block's q/k norms + RoPE + KV store. Results are the unfused kernels' bit for bit; off
  // (`--cuda-no-fusion`) launches kernel per op, for measuring what fusion gains.
  bool fusion = true;
  // The Gated DeltaNet delta rule's form for prefill batches (runtime/backend/gdn_cuda.hpp):
  // the recurrence, which needs no scratch and took 351 µs against the chunked form's 424 µs for
  // a 512-token step of 32 heads on an H200 (bench/results/2026-12-04-gpu-check-h200.md); chunked
  // stays selectable (`--gdn-prefill chunked`). Decode always takes the recurrent kernel.
  cpu::GdnPrefill gdn_prefill = cpu::GdnPrefill::recurrent;
  // Programmatic dependent launch on sm_90+ (`--cuda-pdl`; kernels/cuda/launch.cuh): each kernel's
  // blocks may be scheduled while the previous kernel runs and wait for it at their first
  // instruction, hiding the launch gap between the decode step's small kernels. Process-wide while
  // this Ops lives. Off until a GPU run measures it (docs/decisions/0013-cuda-pdl.md).
  bool pdl = false;
};

// Graph use of a CudaOps: launches, instantiations (an update that cannot reuse the executable
// graph instantiates anew), and whether graphs are still on (a failed recording turns them off).
struct CudaGraphStats {
  uint64_t launches = 0, instantiations = 0;
  bool enabled = false;
  // Of the launches: graphs replayed as recorded (no capture, no update), and the replayable steps
  // that found no graph for their calls and were recorded (Ops::begin_graph's `replayable`).
  uint64_t replays = 0, replay_misses = 0;
};
CudaGraphStats cuda_ops_graph_stats(const Ops& ops);
// Turns step graphs on or off from the next step on (benchmarks compare both). No-op elsewhere.
void cuda_ops_set_graphs(Ops& ops, bool on);

// `device` must be a cuda Device and outlive the returned Ops.
std::unique_ptr<Ops> make_cuda_ops(Device& device, const CudaOpsOptions& options = {});

// For the code that pairs other work with a CudaOps (the DeltaNet ops, the resident MoE executor):
// the cudaStream_t it enqueues on (as void*) and its device. ErrorKind::invalid_arg when `ops` is
// not a CudaOps.
void* cuda_ops_stream(Ops& ops);
Device& cuda_ops_device(Ops& ops);
// Grows `buf`, a scratch buffer that work queued on the CudaOps stream may still read, to at least
// `bytes` (contents dropped): drains the stream, frees it, allocates anew from the ops' device.
void cuda_ops_grow(Ops& ops, DeviceBuffer& buf, size_t bytes, const char* tag);

// Ops calls enqueued so far (every call launches at least one kernel or copy): the benchmark
// reports calls per decoded token. 0 for other backends.
uint64_t cuda_ops_calls(const Ops& ops);
// CUDA kernels this process has run (kernels/cuda/launch_count.hpp: launch() calls on a GPU, the
// kernels the emulator ran, graph nodes included): the benchmark reports kernels per decoded
// token. 0 without CUDA.
uint64_t cuda_kernels_launched();
// Whether the ops run the fused decode kernels (CudaOpsOptions::fusion); false for other backends.
bool cuda_ops_fusion(const Ops& ops);
// Bytes of the backend's own device workspaces (matmul, attention, cuBLAS), allocated when the
// ops are made; 0 for other backends.
uint64_t cuda_ops_workspace_bytes(const Ops& ops);
// The delta rule's prefill form the ops were made with (chunked needs scratch from the budget);
// recurrent for other backends.
cpu::GdnPrefill cuda_ops_gdn_prefill(const Ops& ops);

}  // namespace ferry
