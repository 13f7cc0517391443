#pragma once
// The device side of an offloaded MoE step: the expert products that run on the compute stream
// from device memory (cache slots, prefill staging slots, mapped host memory), in
// kernels/cuda/moe.cuh's terms.
//
//   table:   device array of ExpertPtrs (kernels/moe_table.hpp; device pointers), indexed by ids
//   ids:     (n_tokens, k) int32 device; < 0: this (token, slot) is computed elsewhere
//   x:       (n_tokens, n_embd) float device
//
// Two implementations: CUDA (the grouped kernels of kernels/cuda/moe.cuh) and sim (the CPU
// kernels run in a host_fn on the sim stream, reading the sim arena), so the offload executor's
// device flow runs in CI on the sim device exactly as it runs on the GPU.
#include <array>
#include <cstdint>
#include <memory>

#include "kernels/moe_table.hpp"
#include "runtime/moe/cpu_experts.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {

class DeviceExpertKernels {
 public:
  virtual ~DeviceExpertKernels() = default;
  // Per-slot outputs: every path (slot experts, streamed experts, CPU experts) writes its rows of
  //   y_slots: (n_tokens, k, n_embd) float device, y_slots[t][j] = expert_{ids[t][j]}(x_t),
  //   unweighted
  // and weighted_sum adds them in slot order, so the step's result does not depend on which path
  // computed which slot. Sim: each slot bit-identical to MoeCpuExecutor's per-slot output (decode
  // as compute_decode, prefill grouped by table entry as compute_group).
  //
  // y_slots[t][j] = table[ids[t][j]](x_t) where ids[t][j] ≥ 0; rows with ids < 0 untouched.
  // table holds n_table entries (every id is below it).
  virtual void experts_per_slot(const ExpertShape& s, const ExpertPtrs* table, int64_t n_table, const int32_t* ids,
                                int64_t n_tokens, int32_t k, const float* x, float* y_slots,
                                Stream& stream) = 0;
  // One token (k ≤ DecodeSlots::kMaxSlots): y_slots[j] = slots.w[j](x) where w[j].gate is set, other
  // rows untouched; the same bits as experts_per_slot over a table of those slots.
  virtual void experts_decode(const ExpertShape& s, const DecodeSlots& slots, int32_t k,
                              const float* x, float* y_slots, Stream& stream) = 0;
  // One expert over its pairs p = t·k + j (device int32, distinct tokens, in token order):
  // y_slots[p] = expert(x_t); other rows untouched.
  virtual void expert_pairs_per_slot(const ExpertShape& s, const ExpertPtrs* expert,
                                     const int32_t* pairs, int64_t n_pairs, int32_t k,
                                     const float* x, float* y_slots, Stream& stream) = 0;
  // out[t] = Σ_j y_slots[t][j] · weights[t][j], slots in order (group.hpp weighted_sum).
  // weights: (n_tokens, k) device; out: (n_tokens, n_embd) device.
  virtual void weighted_sum(const float* y_slots, const float* weights, int64_t n_tokens, int32_t k,
                            int64_t n_embd, float* out, Stream& stream) = 0;
  // The fused forms of a decode step (one token); each default runs exactly the calls it names,
  // CUDA fuses them (device_experts_cuda.cpp). Every slot on the device: experts_decode(s, slots,
  // k, x, y_slots), then weighted_sum(y_slots, weights, 1, k, n_embd, out).
  virtual void experts_decode_sum(const ExpertShape& s, const DecodeSlots& slots, int32_t k, const float* x,
                                  float* y_slots, const float* weights, float* out, Stream& stream);
  // The weighted sum with some slots' rows computed elsewhere: scatter_rows(y_slots, rows, idx,
  // n_rows, n_embd), then weighted_sum(y_slots, weights, 1, k, n_embd, out).
  virtual void weighted_sum_rows(float* y_slots, const float* rows, const RowIndex& idx, int64_t n_rows,
                                 const float* weights, int32_t k, int64_t n_embd, float* out, Stream& stream);
  // y_slots[idx[i]] = rows[i], i < n: rows (n, n_embd) device (CPU-computed slots copied up),
  // idx (n) int32 device, distinct row indices t·k + j.
  virtual void scatter_rows(float* y_slots, const float* rows, const int32_t* idx, int64_t n,
                            int64_t n_embd, Stream& stream) = 0;
  // The same with n ≤ RowIndex::kMax indices by value.
  virtual void scatter_rows(float* y_slots, const float* rows, const RowIndex& idx, int64_t n,
                            int64_t n_embd, Stream& stream) = 0;
};

std::unique_ptr<DeviceExpertKernels> make_sim_expert_kernels();
// Scratch (n_tokens·k·n_ff floats) is allocated from `dev` and charged to its budget. fusion:
// the fused decode forms (CudaOpsOptions::fusion; off: the calls they stand for).
// ErrorKind::unsupported in a build without CUDA.
std::unique_ptr<DeviceExpertKernels> make_cuda_expert_kernels(Device& dev, bool fusion = true);

}  // namespace ferry
