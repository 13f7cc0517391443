// Prefill MoE by expert (kernels/cuda/moe.cuh: moe_grouped_slots, moe_grouped_sum and
// moe_expert_pairs_slots): a
// step's (token, slot) pairs are grouped by expert on the device, and each block takes a tile of up
// to kTile pairs of one expert. A warp reads its weight row once for the tile's tokens instead of
// once per pair, which is what the per-pair kernels of moe.cu do: at a 512-token prefill with 8 of
// 256 experts per token, each expert's matrices come from memory about once instead of ~16 times.
// Every (row, pair) is the same warp sum as in the per-pair kernels (moe_device.cuh), so the
// results are the same bits whatever the grouping, the tile or the order within an expert.
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

using detail::kMoeWarps;

constexpr int kTile = 8;  // pairs of one expert per block
constexpr int kGroupThreads = 512;

// Scratch: the tile count, then the tiles {expert, first index into order, pairs}, then order (the
// pair indices t·k + j sorted by expert).
struct GroupedLayout {
  int64_t max_tiles = 0;
  size_t tiles_at = 16, order_at = 0, bytes = 0;
  GroupedLayout(int64_t n_pairs, int64_t n_table) {
    max_tiles = (n_pairs + kTile - 1) / kTile + n_table;  // each expert ends at most one part tile
    order_at = tiles_at + static_cast<size_t>(max_tiles) * sizeof(int4);
    bytes = order_at + static_cast<size_t>(n_pairs) * sizeof(int32_t);
  }
};

// One block: counts the pairs of each expert (ids outside [0, n_table) are skipped), lays out each
// expert's tiles in expert order, then places every pair in its expert's run of `order`.
__global__ void __launch_bounds__(kGroupThreads)
    group_pairs_kernel(const int32_t* __restrict__ ids, int64_t n_pairs, int n_table, int* __restrict__ n_tiles,
                       int4* __restrict__ tiles, int32_t* __restrict__ order) {
  FERRY_PDL_WAIT();
  FERRY_DYNAMIC_SHARED(unsigned, sm);  // count[n_table], then next[n_table]
  unsigned* count = sm;
  unsigned* next = sm + n_table;
  for (int e = threadIdx.x; e < n_table; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    const int32_t e = ids[i];
    if (e >= 0 && e < n_table) atomicAdd(&count[e], 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0, nt = 0;
    for (int e = 0; e < n_table; ++e) {
      const int c = static_cast<int>(count[e]);
      next[e] = static_cast<unsigned>(at);
      for (int b = 0; b < c; b += kTile) tiles[nt++] = int4{e, at + b, min(kTile, c - b), 0};
      at += c;
    }
    *n_tiles = nt;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    const int32_t e = ids[i];
    if (e >= 0 && e < n_table) order[atomicAdd(&next[e], 1u)] = static_cast<int32_t>(i);
  }
}

// The tiles of moe_grouped_sum: tile y of the grouping above; pair b's h row is its pair index.
struct GroupedTiles {
  const ExpertPtrs* table;
  const int* n_tiles;
  const int4* tiles;
  const int32_t* order;
  __device__ bool tile(int y, ExpertPtrs& p, int& first, int& n) const {
    if (y >= *n_tiles) return false;
    const int4 t = tiles[y];
    p = table[t.x];
    first = t.y;
    n = t.z;
    return true;
  }
  __device__ int32_t pair(int i) const { return order[i]; }
  __device__ int64_t h_row(int i) const { return order[i]; }
};
// moe_expert_pairs_slots: one expert, tile y = pairs y·kTile ..; h is compact (row i for pairs[i]).
struct PairTiles {
  const ExpertPtrs* expert;
  const int32_t* pairs;
  int n_pairs;
  __device__ bool tile(int y, ExpertPtrs& p, int& first, int& n) const {
    p = *expert;
    first = y * kTile;
    n = min(kTile, n_pairs - first);
    return true;
  }
  __device__ int32_t pair(int i) const { return pairs[i]; }
  __device__ int64_t h_row(int i) const { return i; }
};

// grid (row blocks of n_ff, tiles): h[h_row] = silu(gate·x_t) ⊙ (up·x_t) for the tile's pairs.
template <GgmlType T, class Tiles>
__global__ void __launch_bounds__(32 * kMoeWarps)
    gate_up_tiles_kernel(Tiles tiles, int64_t n_embd, int64_t n_ff, int k, const float* __restrict__ x,
                         float* __restrict__ h) {
  FERRY_PDL_WAIT();
  const int64_t row = int64_t{blockIdx.x} * kMoeWarps + (threadIdx.x >> 5);
  ExpertPtrs p;
  int first = 0, n = 0;
  if (row >= n_ff || !tiles.tile(static_cast<int>(blockIdx.y), p, first, n)) return;
  const float* xt[kTile];
  float* out[kTile];
#pragma unroll
  for (int b = 0; b < kTile; ++b) {
    const int i = first + min(b, n - 1);
    xt[b] = x + (tiles.pair(i) / k) * n_embd;
    out[b] = h + tiles.h_row(i) * n_ff + row;
  }
  detail::gate_up_rows<T, kTile>(p, row, n_embd, xt, n, out);
}

// grid (row blocks of n_embd, tiles): y_slots[pair] = down · h[h_row] for the tile's pairs.
template <GgmlType T, class Tiles>
__global__ void __launch_bounds__(32 * kMoeWarps)
    down_tiles_kernel(Tiles tiles, int64_t n_embd, int64_t n_ff, const float* __restrict__ h,
                      float* __restrict__ y_slots) {
  FERRY_PDL_WAIT();
  const int64_t row = int64_t{blockIdx.x} * kMoeWarps + (threadIdx.x >> 5);
  ExpertPtrs p;
  int first = 0, n = 0;
  if (row >= n_embd || !tiles.tile(static_cast<int>(blockIdx.y), p, first, n)) return;
  const float* ht[kTile];
#pragma unroll
  for (int b = 0; b < kTile; ++b) ht[b] = h + tiles.h_row(first + min(b, n - 1)) * n_ff;
  float v[kTile];
  detail::down_rows<T, kTile>(p, row, n_ff, ht, v);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int b = 0; b < kTile; ++b)
      if (b < n) y_slots[int64_t{tiles.pair(first + b)} * n_embd + row] = v[b];
  }
}

template <class Tiles>
void launch_tiles(const char* op, GgmlType t_gate_up, GgmlType t_down, const Tiles& tiles, int64_t n_tiles, int k,
                  int64_t n_embd, int64_t n_ff, const float* x, float* h, float* y_slots, cudaStream_t stream) {
  require(n_tiles >= 1 && n_tiles <= 65535, op, "a step of " + std::to_string(n_tiles) + " tiles (at most 65535)");
  const dim3 g1(static_cast<unsigned>((n_ff + kMoeWarps - 1) / kMoeWarps), static_cast<unsigned>(n_tiles));
  FERRY_DISPATCH_WEIGHT_TYPE(t_gate_up, op, {
    launch(gate_up_tiles_kernel<kT, Tiles>, g1, 32 * kMoeWarps, 0, stream, tiles, n_embd, n_ff, k, x, h);
  });
  FERRY_CUDA_CHECK_LAUNCH("gate_up_tiles_kernel");
  const dim3 g2(static_cast<unsigned>((n_embd + kMoeWarps - 1) / kMoeWarps), static_cast<unsigned>(n_tiles));
  FERRY_DISPATCH_WEIGHT_TYPE(t_down, op, {
    launch(down_tiles_kernel<kT, Tiles>, g2, 32 * kMoeWarps, 0, stream, tiles, n_embd, n_ff, h, y_slots);
  });
  FERRY_CUDA_CHECK_LAUNCH("down_tiles_kernel");
}

void check_expert_shapes(const char* op, GgmlType t_gate_up, GgmlType t_down, int k, int64_t n_embd, int64_t n_ff,
                         const float* x, const float* h, const float* y_slots) {
  require(x && h && y_slots, op, "null pointer argument");
  require(k >= 1 && k <= 64, op, "k must be in [1, 64], got " + std::to_string(k));
  require(aligned(x, 16) && aligned(h, 16) && aligned(y_slots, 16), op, "activations must be 16-byte aligned");
  check_weight_args(op, t_gate_up, reinterpret_cast<const void*>(16), n_ff, n_embd);
  check_weight_args(op, t_down, reinterpret_cast<const void*>(16), n_embd, n_ff);
  require(n_ff % 4 == 0, op, "n_ff must be a multiple of 4 (h rows are read with float4)");
}

}  // namespace

size_t moe_grouped_scratch_bytes(int64_t n_pairs, int64_t n_table) {
  return GroupedLayout(n_pairs, n_table).bytes;
}

void moe_grouped_slots(GgmlType t_gate_up, GgmlType t_down, const ExpertPtrs* table, int64_t n_table,
                       const int32_t* ids, int64_t n_tokens, int k, int64_t n_embd, int64_t n_ff, const float* x,
                       float* h, float* y_slots, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  const char* op = "moe_grouped_slots";
  require(table && ids && scratch, op, "null pointer argument");
  require(n_tokens >= 1 && n_table >= 1 && n_table <= kMoeGroupedMaxTable, op,
          "n_tokens must be ≥ 1 and the table hold 1 to " + std::to_string(kMoeGroupedMaxTable) + " experts");
  check_expert_shapes(op, t_gate_up, t_down, k, n_embd, n_ff, x, h, y_slots);
  const int64_t n_pairs = n_tokens * k;
  const GroupedLayout lay(n_pairs, n_table);
  require(aligned(scratch, 16) && scratch_bytes >= lay.bytes, op,
          "scratch of " + std::to_string(scratch_bytes) + " bytes (needs " + std::to_string(lay.bytes) +
              ", 16-byte aligned)");
  auto* base = static_cast<uint8_t*>(scratch);
  auto* n_tiles = reinterpret_cast<int*>(base);
  auto* tiles = reinterpret_cast<int4*>(base + lay.tiles_at);
  auto* order = reinterpret_cast<int32_t*>(base + lay.order_at);
  launch(group_pairs_kernel, 1, kGroupThreads, static_cast<size_t>(2 * n_table) * sizeof(unsigned), stream, ids, n_pairs,
         static_cast<int>(n_table), n_tiles, tiles, order);
  FERRY_CUDA_CHECK_LAUNCH("group_pairs_kernel");
  launch_tiles(op, t_gate_up, t_down, GroupedTiles{table, n_tiles, tiles, order}, lay.max_tiles, k, n_embd, n_ff, x,
               h, y_slots, stream);
}

void moe_grouped_sum(GgmlType t_gate_up, GgmlType t_down, const ExpertPtrs* table, int64_t n_table,
                     const int32_t* ids, const float* weights, int64_t n_tokens, int k, int64_t n_embd,
                     int64_t n_ff, const float* x, float* h, float* y_slots, float* out, void* scratch,
                     size_t scratch_bytes, cudaStream_t stream) {
  require(weights && out, "moe_grouped_sum", "null pointer argument");
  moe_grouped_slots(t_gate_up, t_down, table, n_table, ids, n_tokens, k, n_embd, n_ff, x, h, y_slots, scratch,
                    scratch_bytes, stream);
  moe_sum(y_slots, weights, n_tokens, k, n_embd, out, stream);
}

void moe_expert_pairs_slots(GgmlType t_gate_up, GgmlType t_down, const ExpertPtrs* expert,
                            const int32_t* pairs, int64_t n_pairs, int k, int64_t n_embd,
                            int64_t n_ff, const float* x, float* h, float* y_slots,
                            cudaStream_t stream) {
  const char* op = "moe_expert_pairs_slots";
  if (n_pairs == 0) return;
  require(expert && pairs, op, "null pointer argument");
  require(n_pairs >= 1 && n_pairs <= 65535, op, "n_pairs must be in [1, 65535]");
  check_expert_shapes(op, t_gate_up, t_down, k, n_embd, n_ff, x, h, y_slots);
  launch_tiles(op, t_gate_up, t_down, PairTiles{expert, pairs, static_cast<int>(n_pairs)},
               (n_pairs + kTile - 1) / kTile, k, n_embd, n_ff, x, h, y_slots, stream);
}

}  // namespace ferry::cuda
