#pragma once
// Grouped expert products for the MoE step: each (token, slot) names an expert through a device
// table of pointers, so experts can live anywhere (VRAM cache slots, a pool, a mapped host buffer).
//
//   table:   (n_table) ExpertPtrs in device memory, indexed by the ids below (the caller decides
//            what an id is: global expert id, or cache slot)
//   ids:     (n_tokens, k) int32 device; id < 0 = skip this slot (computed elsewhere, e.g. on CPU)
//   weights: (n_tokens, k) float device, routing weights
//   x:       (n_tokens, n_embd) float         h: (n_tokens, k, n_ff) float scratch
//   y:       (n_tokens, n_embd) float
// Expert matrices: gate, up (n_ff, n_embd) of type t_gate_up; down (n_embd, n_ff) of type t_down.
// Requirements as for matmul_direct (16-byte aligned pointers, block-multiple widths).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/moe_table.hpp"
#include "runtime/core/types.hpp"

namespace ferry::cuda {

// The shared structs (kernels/moe_table.hpp), named here as the kernels use them.
using ferry::DecodeSlots;
using ferry::ExpertPtrs;
using ferry::RowIndex;

// h[t][j] = silu(gate_e · x_t) ⊙ (up_e · x_t), e = ids[t][j]; h[t][j] = 0 where e < 0.
// One warp per (row, token, slot) computes both dots from one pass over x (fused SwiGLU).
void moe_gate_up_swiglu(GgmlType t_gate_up, const ExpertPtrs* table, const int32_t* ids,
                        int64_t n_tokens, int k, int64_t n_embd, int64_t n_ff, const float* x,
                        float* h, cudaStream_t stream);

// One kernel family for every MoE executor (the resident one and the offload engine's device
// flow): every path (grouped slot experts, streamed experts, CPU experts) writes y_slots
// (n_tokens, k, n_embd), y_slots[t][j] =
// expert_{ids[t][j]}(x_t) unweighted, and one moe_sum then weights and adds them in slot order,
// so the result does not depend on which path computed which slot.

// y_slots[t][j] = down_e · h[t][j] (unweighted) for slots with e = ids[t][j] ≥ 0; rows of slots
// with e < 0 are left untouched (another path writes them). h: (n_tokens, k, n_ff) from
// moe_gate_up_swiglu; y_slots: (n_tokens, k, n_embd). One warp per output row.
void moe_down_slots(GgmlType t_down, const ExpertPtrs* table, const int32_t* ids, int64_t n_tokens,
                    int k, int64_t n_embd, int64_t n_ff, const float* h, float* y_slots,
                    cudaStream_t stream);

// One expert over its (token, slot) pairs p = t·k + j — a streamed prefill expert reads only its
// own tokens instead of scanning all n_tokens·k (an expert appears at most once per token):
//   pairs: (n_pairs) int32 device;  h: (n_pairs, n_ff) scratch;  y_slots: (n_tokens·k, n_embd)
//   y_slots[p] = down(silu(gate·x_t) ⊙ up·x_t)   (unweighted), other rows untouched.
// Each block takes up to 8 pairs (moe_grouped.cu), reading each weight row once for them; every
// row's value is the bits moe_gate_up_swiglu and moe_down_slots give for that pair.
void moe_expert_pairs_slots(GgmlType t_gate_up, GgmlType t_down, const ExpertPtrs* expert,
                            const int32_t* pairs, int64_t n_pairs, int k, int64_t n_embd,
                            int64_t n_ff, const float* x, float* h, float* y_slots,
                            cudaStream_t stream);

// out[t] = Σ_j y_slots[t][j] · weights[t][j], slots added in order (out = y[t][0]·w[t][0], then
// += y[t][j]·w[t][j] for j = 1..k-1, as the CPU executor and llama.cpp add them), every slot
// included whatever path wrote it. y_slots: (n_tokens, k, n_embd); weights: (n_tokens, k);
// out: (n_tokens, n_embd). One thread per output element (memory-bound).
void moe_sum(const float* y_slots, const float* weights, int64_t n_tokens, int k, int64_t n_embd,
             float* out, cudaStream_t stream);

// moe_down_slots then moe_sum in one launch, for an executor whose every slot is in the table
// (ids ≥ 0; a slot with id < 0 adds 0): out[t] = Σ_j (down_e · h[t][j]) · weights[t][j], the same
// dots and the same slot-order sum with explicit roundings, so the result is bit-identical to the
// two kernels'. One warp per output row of one token.
// With `shared`, the same launch also computes a shared expert's down projection (its own
// blocks): shared->out[t] = W·shared->h[t], W (n_embd, shared->ff) of type t_down, each row the
// dot matvec's single-vector kernel computes, so bit for bit the dense matmul it replaces.
struct SharedDown {
  const uint8_t* w = nullptr;
  const float* h = nullptr;  // (n_tokens, ff), 16-byte aligned
  int64_t ff = 0;
  float* out = nullptr;      // (n_tokens, n_embd)
};
void moe_down_sum(GgmlType t_down, const ExpertPtrs* table, const int32_t* ids, const float* weights,
                  int64_t n_tokens, int k, int64_t n_embd, int64_t n_ff, const float* h, float* out,
                  cudaStream_t stream, const SharedDown* shared = nullptr);

// A prefill step grouped by expert (moe_grouped.cu): a first launch sorts the (token, slot) pairs
// by expert on the device, then each block computes a tile of up to 8 pairs of one expert, so an
// expert's matrices are read about once per 8 of its tokens instead of once per pair. The same
// result, bit for bit, as moe_gate_up_swiglu + moe_down_slots + moe_sum (and so moe_down_sum):
// each (row, pair) is the same warp's same sums. Slots whose id is outside [0, n_table) are not
// computed (their y_slots rows are left as they are and still summed). h: (n_tokens, k, n_ff) and
// y_slots: (n_tokens, k, n_embd) scratch; scratch: moe_grouped_scratch_bytes(n_tokens·k, n_table)
// bytes of device memory, 16-byte aligned.
// moe_grouped_slots is the same without the sum: moe_gate_up_swiglu + moe_down_slots, bit for bit
// (y_slots rows of ids outside [0, n_table) untouched; h rows of those pairs are not written).
// Whether a step goes grouped: prompt batches of kMoeGroupedMinTokens or more (decode and the small
// batches of parallel decoding keep the per-pair kernels) over a table the grouping kernel can
// count in shared memory (two counters an entry).
constexpr int64_t kMoeGroupedMinTokens = 16, kMoeGroupedMaxTable = 4096;
constexpr bool moe_grouped_applies(int64_t n_tokens, int64_t n_table) {
  return n_tokens >= kMoeGroupedMinTokens && n_table >= 1 && n_table <= kMoeGroupedMaxTable;
}
size_t moe_grouped_scratch_bytes(int64_t n_pairs, int64_t n_table);
void moe_grouped_slots(GgmlType t_gate_up, GgmlType t_down, const ExpertPtrs* table, int64_t n_table,
                       const int32_t* ids, int64_t n_tokens, int k, int64_t n_embd, int64_t n_ff, const float* x,
                       float* h, float* y_slots, void* scratch, size_t scratch_bytes, cudaStream_t stream);
void moe_grouped_sum(GgmlType t_gate_up, GgmlType t_down, const ExpertPtrs* table, int64_t n_table,
                     const int32_t* ids, const float* weights, int64_t n_tokens, int k, int64_t n_embd,
                     int64_t n_ff, const float* x, float* h, float* y_slots, float* out, void* scratch,
                     size_t scratch_bytes, cudaStream_t stream);

// y[idx[i]] = rows[i] for i < n: places rows computed elsewhere (the CPU experts' per-slot
// outputs) into y_slots. rows: (n, n_embd) device; idx: (n) int32 device, row indices of y
// (t·k + j for y_slots), distinct; y: (·, n_embd). n = 0 is a no-op.
void moe_scatter_rows(const float* rows, const int32_t* idx, int64_t n, int64_t n_embd, float* y,
                      cudaStream_t stream);

// A decode step (one token) whose slots ride in the launch itself, by value: no table copy, so
// nothing of the step waits on a copy engine behind the copy streams' expert transfers. Slot j
// (j < k ≤ kMaxSlots) is computed when w[j].gate is not null; its rows of h and y_slots are
// written as moe_gate_up_swiglu + moe_down_slots write them (the same kernels), other slots' y
// rows are left untouched. h: (k, n_ff) scratch; y_slots: (k, n_embd).
void moe_decode_slots(GgmlType t_gate_up, GgmlType t_down, const DecodeSlots& slots, int k,
                      int64_t n_embd, int64_t n_ff, const float* x, float* h, float* y_slots,
                      cudaStream_t stream);

// One token's slots with the weighted sum (the offload engine's decode when every slot is on the
// device): moe_decode_slots' gate/up launch, then moe_down_sum's over the slots by value:
// out (n_embd) = Σ_j down_j·h_j · weights[j], bit for bit moe_decode_slots + moe_sum. Every slot
// must have an expert. h: (k, n_ff) scratch; weights: (k) device.
void moe_decode_sum(GgmlType t_gate_up, GgmlType t_down, const DecodeSlots& slots, int k, int64_t n_embd,
                    int64_t n_ff, const float* x, float* h, const float* weights, float* out, cudaStream_t stream);
// One token's weighted sum where the rows of some slots come from elsewhere: slot idx.i[r]'s row is
// rows[r] (r < n_rows: the CPU experts' rows, device-readable), every other slot's is y_slots[j];
// bit for bit moe_scatter_rows + moe_sum, in one launch.
void moe_sum_rows(const float* y_slots, const float* rows, const RowIndex& idx, int64_t n_rows, const float* weights,
                  int k, int64_t n_embd, float* out, cudaStream_t stream);

// moe_scatter_rows with at most RowIndex::kMax row indices carried by value in the launch.
void moe_scatter_rows(const float* rows, const RowIndex& idx, int64_t n, int64_t n_embd, float* y,
                      cudaStream_t stream);

}  // namespace ferry::cuda
