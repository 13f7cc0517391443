#include <algorithm>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/moe_device.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

using detail::down_row;
using detail::gate_up_row;
using detail::kMoeWarps;
using detail::Unit;

constexpr int kWarps = kMoeWarps;
constexpr int kMaxK = 64;

// Where a launch finds the expert of (token, slot) ts = t·k + j: a table in device memory indexed
// by device ids (any step), or a decode step's slots passed by value in the launch.
struct DeviceTable {
  const ExpertPtrs* table;
  const int32_t* ids;
  __device__ __forceinline__ bool find(int64_t ts, ExpertPtrs& p) const {
    const int32_t e = ids[ts];
    if (e < 0) return false;
    p = table[e];
    return true;
  }
};
struct InlineTable {
  DecodeSlots slots;
  __device__ __forceinline__ bool find(int64_t ts, ExpertPtrs& p) const {
    p = slots.w[ts];
    return p.gate != nullptr;
  }
};
// Row indices read from device memory, or carried by value.
struct DeviceIndex {
  const int32_t* idx;
  __device__ __forceinline__ int32_t operator[](int64_t i) const { return idx[i]; }
};
struct InlineIndex {
  RowIndex rows;
  __device__ __forceinline__ int32_t operator[](int64_t i) const { return rows.i[i]; }
};

// grid.x: row blocks of n_ff; grid.y: token·k + slot.
template <GgmlType T, typename Table>
__global__ void __launch_bounds__(32 * kWarps)
    gate_up_kernel(Table table, int64_t n_embd, int64_t n_ff, int k, const float* __restrict__ x,
                   float* __restrict__ h) {
  FERRY_PDL_WAIT();
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  const int64_t ts = blockIdx.y;  // token * k + slot
  if (row >= n_ff) return;
  float* out = h + ts * n_ff + row;
  ExpertPtrs p;
  if (!table.find(ts, p)) {
    if (lane == 0) *out = 0.f;
    return;
  }
  gate_up_row<T>(p, row, n_embd, x + (ts / k) * n_embd, out);
}

// y_slots[ts] = down_e · h[ts] for ts = token·k + slot with e = ids[ts] ≥ 0 (others untouched).
// grid.x: row blocks of n_embd; grid.y: token·k + slot.
template <GgmlType T, typename Table>
__global__ void __launch_bounds__(32 * kWarps)
    down_slots_kernel(Table table, int64_t n_embd, int64_t n_ff, const float* __restrict__ h,
                      float* __restrict__ y) {
  FERRY_PDL_WAIT();
  const int64_t row = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  const int64_t ts = blockIdx.y;
  if (row >= n_embd) return;
  ExpertPtrs p;
  if (!table.find(ts, p)) return;  // the whole block: ts is the block's
  const float v = down_row<T>(p, row, n_ff, h + ts * n_ff);
  if ((threadIdx.x & 31) == 0) y[ts * n_embd + row] = v;
}

// out[t][row] = Σ_j (down_e · h[t·k + j])[row] · weights[t·k + j], sum_kernel's roundings.
// grid.x: row blocks of n_embd; grid.y: token.
// With grid.z = 2, the blocks of z = 1 compute the shared expert's down projection instead
// (SharedDown: a dense matrix of the same type; matvec_rows_kernel<T, 1>'s dot per row).
template <GgmlType T, typename Table>
__global__ void __launch_bounds__(32 * kWarps)
    down_sum_kernel(Table table, const float* __restrict__ weights, int k, int64_t n_embd, int64_t n_ff,
                    const float* __restrict__ h, float* __restrict__ out, SharedDown sh) {
  FERRY_PDL_WAIT();
  const int64_t row = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  const int64_t t = blockIdx.y;
  if (row >= n_embd) return;
  if (blockIdx.z == 1) {
    const ExpertPtrs dense{nullptr, nullptr, sh.w};
    const float v = down_row<T>(dense, row, sh.ff, sh.h + t * sh.ff);
    if ((threadIdx.x & 31) == 0) sh.out[t * n_embd + row] = v;
    return;
  }
  float acc = 0.f;
  for (int j = 0; j < k; ++j) {
    const int64_t ts = t * k + j;
    ExpertPtrs p;
    const float v = table.find(ts, p) ? down_row<T>(p, row, n_ff, h + ts * n_ff) : 0.f;
    const float wv = __fmul_rn(v, weights[ts]);
    acc = j == 0 ? wv : __fadd_rn(acc, wv);
  }
  if ((threadIdx.x & 31) == 0) out[t * n_embd + row] = acc;
}

// down_sum_kernel's result, bit for bit, for decode shapes: one output row per block, the row's k
// expert dots spread over the block's warps (warp w takes slots w, w + kSpreadWarps, ...), so their
// dependent loads (ids → table → the expert's row → the warp sum) overlap instead of following one
// another as they do in down_sum_kernel's per-warp slot loop; thread 0 then adds the k weighted
// dots in slot order with the same roundings. grid (n_embd, n_tokens, 1 or 2): with grid.z = 2 the
// blocks of z = 1 compute the shared expert's down rows, kSpreadWarps rows per block (the blocks
// past n_embd / kSpreadWarps return at once).
constexpr int kSpreadWarps = 8;
constexpr int64_t kSpreadMaxTokens = 4;
template <GgmlType T, typename Table>
__global__ void __launch_bounds__(32 * kSpreadWarps)
    down_sum_spread_kernel(Table table, const float* __restrict__ weights, int k, int64_t n_embd, int64_t n_ff,
                           const float* __restrict__ h, float* __restrict__ out, SharedDown sh) {
  FERRY_PDL_WAIT();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.y;
  if (blockIdx.z == 1) {
    const int64_t row = int64_t{blockIdx.x} * kSpreadWarps + warp;
    if (row >= n_embd) return;
    const ExpertPtrs dense{nullptr, nullptr, sh.w};
    const float v = down_row<T>(dense, row, sh.ff, sh.h + t * sh.ff);
    if (lane == 0) sh.out[t * n_embd + row] = v;
    return;
  }
  __shared__ float wv[kMaxK];
  const int64_t row = blockIdx.x;
  for (int j = warp; j < k; j += kSpreadWarps) {
    const int64_t ts = t * k + j;
    ExpertPtrs p;
    const float v = table.find(ts, p) ? down_row<T>(p, row, n_ff, h + ts * n_ff) : 0.f;
    if (lane == 0) wv[j] = __fmul_rn(v, weights[ts]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc = wv[0];
    for (int j = 1; j < k; ++j) acc = __fadd_rn(acc, wv[j]);
    out[t * n_embd + row] = acc;
  }
}

// down_sum_kernel or, for up to kSpreadMaxTokens tokens, down_sum_spread_kernel (the same bits);
// a shared expert's rows too when sh has its matrix.
template <GgmlType T, typename Table>
void launch_down_sum(const Table& table, const float* weights, int k, int64_t n_tokens, int64_t n_embd, int64_t n_ff,
                     const float* h, float* out, const SharedDown& sh, cudaStream_t stream) {
  const unsigned z = sh.w ? 2u : 1u;
  if (n_tokens <= kSpreadMaxTokens) {
    launch(down_sum_spread_kernel<T, Table>, dim3(static_cast<unsigned>(n_embd), static_cast<unsigned>(n_tokens), z),
           32 * kSpreadWarps, 0, stream, table, weights, k, n_embd, n_ff, h, out, sh);
  } else {
    launch(down_sum_kernel<T, Table>,
           dim3(static_cast<unsigned>((n_embd + kWarps - 1) / kWarps), static_cast<unsigned>(n_tokens), z), 32 * kWarps,
           0, stream, table, weights, k, n_embd, n_ff, h, out, sh);
  }
}

constexpr int kElemThreads = 256;
constexpr int64_t kMaxElemBlocks = int64_t{1} << 20;  // grid-stride beyond this

unsigned elem_grid(int64_t n) {
  return static_cast<unsigned>(
      std::min<int64_t>((n + kElemThreads - 1) / kElemThreads, kMaxElemBlocks));
}

// One thread per out element: the slot-order weighted sum with explicit roundings (no FMA
// contraction), the CPU executor's operations.
__global__ void __launch_bounds__(kElemThreads)
    sum_kernel(const float* __restrict__ y, const float* __restrict__ weights, int64_t n_tokens,
               int k, int64_t n_embd, float* __restrict__ out) {
  FERRY_PDL_WAIT();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n_tokens * n_embd;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / n_embd;
    const float* yt = y + t * k * n_embd + (i - t * n_embd);
    const float* wt = weights + t * k;
    float acc = __fmul_rn(yt[0], wt[0]);
    for (int j = 1; j < k; ++j) acc = __fadd_rn(acc, __fmul_rn(yt[j * n_embd], wt[j]));
    out[i] = acc;
  }
}

// One token: out[c] = Σ_j y_j[c] · weights[j] in slot order with sum_kernel's roundings, where
// y_j is rows[r] for the slot j = idx.i[r] (r < n_rows) and y_slots[j] otherwise.
__global__ void __launch_bounds__(kElemThreads)
    sum_rows_kernel(const float* __restrict__ y, const float* __restrict__ rows, RowIndex idx, int n_rows,
                    const float* __restrict__ weights, int k, int64_t n_embd, float* __restrict__ out) {
  FERRY_PDL_WAIT();
  for (int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; c < n_embd; c += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < k; ++j) {
      const float* src = y + int64_t{j} * n_embd;
      for (int r = 0; r < n_rows; ++r)
        if (idx.i[r] == j) src = rows + int64_t{r} * n_embd;
      const float wv = __fmul_rn(src[c], weights[j]);
      acc = j == 0 ? wv : __fadd_rn(acc, wv);
    }
    out[c] = acc;
  }
}

// y[idx[r]][c] = rows[r][c], one thread per element of rows.
template <typename Index>
__global__ void __launch_bounds__(kElemThreads)
    scatter_rows_kernel(const float* __restrict__ rows, Index idx, int64_t n, int64_t n_embd,
                        float* __restrict__ y) {
  FERRY_PDL_WAIT();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n * n_embd;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / n_embd;
    y[int64_t{idx[r]} * n_embd + (i - r * n_embd)] = rows[i];
  }
}

void check_moe_args(const char* op, const ExpertPtrs* table, const int32_t* ids, int64_t n_tokens,
                    int k, const float* a, const float* b) {
  require(table && ids && a && b, op, "null pointer argument");
  require(k >= 1 && k <= kMaxK, op, "k must be in [1, 64], got " + std::to_string(k));
  require(n_tokens >= 1 && n_tokens * k <= 65535, op, "n_tokens·k must be in [1, 65535]");
  require(aligned(a, 16) && aligned(b, 16), op, "activations must be 16-byte aligned");
}

}  // namespace

void moe_gate_up_swiglu(GgmlType t_gate_up, const ExpertPtrs* table, const int32_t* ids,
                        int64_t n_tokens, int k, int64_t n_embd, int64_t n_ff, const float* x,
                        float* h, cudaStream_t stream) {
  const char* op = "moe_gate_up_swiglu";
  check_moe_args(op, table, ids, n_tokens, k, x, h);
  // Validates type and widths; the per-expert pointers are checked for alignment by the caller
  // (a table lives on the device; reading it back here would cost a sync).
  check_weight_args(op, t_gate_up, reinterpret_cast<const void*>(16), n_ff, n_embd);
  require(n_ff % 4 == 0, op, "n_ff must be a multiple of 4 (h rows are read with float4)");
  const dim3 grid(static_cast<unsigned>((n_ff + kWarps - 1) / kWarps), static_cast<unsigned>(n_tokens * k));
  FERRY_DISPATCH_WEIGHT_TYPE(t_gate_up, op, {
    launch(gate_up_kernel<kT, DeviceTable>, grid, 32 * kWarps, 0, stream, DeviceTable{table, ids},
           n_embd, n_ff, k, x, h);
  });
  FERRY_CUDA_CHECK_LAUNCH("gate_up_kernel");
}

void moe_down_slots(GgmlType t_down, const ExpertPtrs* table, const int32_t* ids, int64_t n_tokens,
                    int k, int64_t n_embd, int64_t n_ff, const float* h, float* y_slots,
                    cudaStream_t stream) {
  const char* op = "moe_down_slots";
  check_moe_args(op, table, ids, n_tokens, k, h, y_slots);
  check_weight_args(op, t_down, reinterpret_cast<const void*>(16), n_embd, n_ff);
  const dim3 grid(static_cast<unsigned>((n_embd + kWarps - 1) / kWarps),
                  static_cast<unsigned>(n_tokens * k));
  FERRY_DISPATCH_WEIGHT_TYPE(t_down, op, {
    launch(down_slots_kernel<kT, DeviceTable>, grid, 32 * kWarps, 0, stream,
           DeviceTable{table, ids}, n_embd, n_ff, h, y_slots);
  });
  FERRY_CUDA_CHECK_LAUNCH("down_slots_kernel");
}

void moe_down_sum(GgmlType t_down, const ExpertPtrs* table, const int32_t* ids, const float* weights,
                  int64_t n_tokens, int k, int64_t n_embd, int64_t n_ff, const float* h, float* out,
                  cudaStream_t stream, const SharedDown* shared) {
  const char* op = "moe_down_sum";
  check_moe_args(op, table, ids, n_tokens, k, h, out);
  require(weights != nullptr, op, "null weights");
  check_weight_args(op, t_down, reinterpret_cast<const void*>(16), n_embd, n_ff);
  SharedDown sh{};
  if (shared) {
    sh = *shared;
    check_weight_args(op, t_down, sh.w, n_embd, sh.ff);
    require(sh.h && sh.out && aligned(sh.h, 16) && aligned(sh.w, 16), op,
            "the shared expert's input and output must be set, its input and matrix 16-byte aligned");
  }
  FERRY_DISPATCH_WEIGHT_TYPE(t_down, op, {
    launch_down_sum<kT>(DeviceTable{table, ids}, weights, k, n_tokens, n_embd, n_ff, h, out, sh, stream);
  });
  FERRY_CUDA_CHECK_LAUNCH("down_sum_kernel");
}

void moe_sum(const float* y_slots, const float* weights, int64_t n_tokens, int k, int64_t n_embd,
             float* out, cudaStream_t stream) {
  const char* op = "moe_sum";
  require(y_slots && weights && out, op, "null pointer argument");
  require(k >= 1 && k <= kMaxK, op, "k must be in [1, 64], got " + std::to_string(k));
  require(n_tokens >= 1 && n_embd >= 1, op, "n_tokens and n_embd must be ≥ 1");
  launch(sum_kernel, elem_grid(n_tokens * n_embd), kElemThreads, 0, stream, y_slots, weights,
         n_tokens, k, n_embd, out);
  FERRY_CUDA_CHECK_LAUNCH("sum_kernel");
}

void moe_scatter_rows(const float* rows, const int32_t* idx, int64_t n, int64_t n_embd, float* y,
                      cudaStream_t stream) {
  const char* op = "moe_scatter_rows";
  if (n == 0) return;
  require(rows && idx && y, op, "null pointer argument");
  require(n >= 1 && n_embd >= 1, op, "n and n_embd must be ≥ 1");
  launch(scatter_rows_kernel<DeviceIndex>, elem_grid(n * n_embd), kElemThreads, 0, stream, rows,
         DeviceIndex{idx}, n, n_embd, y);
  FERRY_CUDA_CHECK_LAUNCH("scatter_rows_kernel");
}

namespace {

// A decode step's checks and its gate/up launch over the slots by value (the first half of
// moe_decode_slots and moe_decode_sum). every_slot: each slot must have an expert.
InlineTable decode_gate_up(const char* op, GgmlType t_gate_up, GgmlType t_down, const DecodeSlots& slots, int k,
                           int64_t n_embd, int64_t n_ff, const float* x, float* h, bool every_slot,
                           cudaStream_t stream) {
  require(x && h, op, "null pointer argument");
  require(k >= 1 && k <= DecodeSlots::kMaxSlots, op,
          "k must be in [1, " + std::to_string(DecodeSlots::kMaxSlots) + "], got " + std::to_string(k));
  require(aligned(x, 16) && aligned(h, 16), op, "activations must be 16-byte aligned");
  for (int j = 0; j < k; ++j) {  // the pointers are here on the host: check them all
    const ExpertPtrs& p = slots.w[j];
    require(p.gate || !every_slot, op, "slot " + std::to_string(j) + " has no expert");
    if (!p.gate) continue;
    require(p.up && p.down, op, "slot " + std::to_string(j) + " has a null up or down");
    require(aligned(p.gate, 16) && aligned(p.up, 16) && aligned(p.down, 16), op,
            "expert matrices must be 16-byte aligned");
  }
  check_weight_args(op, t_gate_up, reinterpret_cast<const void*>(16), n_ff, n_embd);
  check_weight_args(op, t_down, reinterpret_cast<const void*>(16), n_embd, n_ff);
  require(n_ff % 4 == 0, op, "n_ff must be a multiple of 4 (h rows are read with float4)");
  const InlineTable table{slots};
  const dim3 g1(static_cast<unsigned>((n_ff + kWarps - 1) / kWarps), static_cast<unsigned>(k));
  FERRY_DISPATCH_WEIGHT_TYPE(t_gate_up, op, {
    launch(gate_up_kernel<kT, InlineTable>, g1, 32 * kWarps, 0, stream, table, n_embd, n_ff, k, x, h);
  });
  FERRY_CUDA_CHECK_LAUNCH("gate_up_kernel");
  return table;
}

}  // namespace

void moe_decode_slots(GgmlType t_gate_up, GgmlType t_down, const DecodeSlots& slots, int k,
                      int64_t n_embd, int64_t n_ff, const float* x, float* h, float* y_slots,
                      cudaStream_t stream) {
  const char* op = "moe_decode_slots";
  require(y_slots && aligned(y_slots, 16), op, "y_slots must be non-null and 16-byte aligned");
  const InlineTable table = decode_gate_up(op, t_gate_up, t_down, slots, k, n_embd, n_ff, x, h, false, stream);
  const dim3 g2(static_cast<unsigned>((n_embd + kWarps - 1) / kWarps), static_cast<unsigned>(k));
  FERRY_DISPATCH_WEIGHT_TYPE(t_down, op, {
    launch(down_slots_kernel<kT, InlineTable>, g2, 32 * kWarps, 0, stream, table, n_embd, n_ff, h,
           y_slots);
  });
  FERRY_CUDA_CHECK_LAUNCH("down_slots_kernel");
}

void moe_decode_sum(GgmlType t_gate_up, GgmlType t_down, const DecodeSlots& slots, int k, int64_t n_embd,
                    int64_t n_ff, const float* x, float* h, const float* weights, float* out, cudaStream_t stream) {
  const char* op = "moe_decode_sum";
  require(weights && out, op, "null pointer argument");
  // Every slot is computed here (a sum over rows computed elsewhere is moe_sum_rows').
  const InlineTable table = decode_gate_up(op, t_gate_up, t_down, slots, k, n_embd, n_ff, x, h, true, stream);
  FERRY_DISPATCH_WEIGHT_TYPE(t_down, op, {
    launch_down_sum<kT>(table, weights, k, 1, n_embd, n_ff, h, out, SharedDown{}, stream);
  });
  FERRY_CUDA_CHECK_LAUNCH("down_sum_kernel");
}

void moe_sum_rows(const float* y_slots, const float* rows, const RowIndex& idx, int64_t n_rows, const float* weights,
                  int k, int64_t n_embd, float* out, cudaStream_t stream) {
  const char* op = "moe_sum_rows";
  require(y_slots && weights && out && (n_rows == 0 || rows), op, "null pointer argument");
  require(k >= 1 && k <= kMaxK, op, "k must be in [1, 64], got " + std::to_string(k));
  require(n_rows >= 0 && n_rows <= RowIndex::kMax && n_embd >= 1, op,
          "n_rows must be in [0, " + std::to_string(RowIndex::kMax) + "] and n_embd ≥ 1");
  launch(sum_rows_kernel, elem_grid(n_embd), kElemThreads, 0, stream, y_slots, rows, idx, static_cast<int>(n_rows),
         weights, k, n_embd, out);
  FERRY_CUDA_CHECK_LAUNCH("sum_rows_kernel");
}

void moe_scatter_rows(const float* rows, const RowIndex& idx, int64_t n, int64_t n_embd, float* y,
                      cudaStream_t stream) {
  const char* op = "moe_scatter_rows";
  if (n == 0) return;
  require(rows && y, op, "null pointer argument");
  require(n >= 1 && n <= RowIndex::kMax && n_embd >= 1, op,
          "n must be in [1, " + std::to_string(RowIndex::kMax) + "] and n_embd ≥ 1");
  launch(scatter_rows_kernel<InlineIndex>, elem_grid(n * n_embd), kElemThreads, 0, stream, rows,
         InlineIndex{idx}, n, n_embd, y);
  FERRY_CUDA_CHECK_LAUNCH("scatter_rows_kernel");
}

}  // namespace ferry::cuda
