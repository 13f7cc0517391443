// Staged flash-decoding: the decode path of cuda::attention for every KV type where it applies.
//
// The register split (attention_split.cu) holds the whole GQA group's queries and accumulators in
// every lane (at 8 heads of d=256: 232 registers, two blocks of 4 warps per SM) and sums each key's
// dot with five shuffles per head: few loads in flight, issue slots spent on reductions. Here the
// block stages tiles of K and V rows in shared memory, loaded by all its threads one tile ahead
// (through registers, so the next tile's loads are in flight while this one is used), and each
// warp takes one query head: it dots its query with N keys of the tile, reduces the N partial sums
// with one transposing butterfly (N − 1 + 5 − log2 N shuffles instead of 5N), takes one exp per key
// and accumulates V from shared memory. Warps beyond the group size take other keys of the tile;
// the block merges its warps per head and writes the same partials as the register split, which
// launch_reduce (attention_device.cuh) reduces.
//
// Two ways to read a staged row (the policies below): the plain F16/F32 pair with M = d/32
// contiguous dims per lane and one vector load per row, and every other pair (quantized, BF16,
// mixed) decoded value by value as kv_quant_device.cuh does, with dims lane + 32m, the query
// rotated and rounded as llama.cpp's CPU flash attention does (prepare_query) and the output
// rotated back by the combine kernel.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kv_quant_device.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

using namespace attn;

constexpr int kStagedWarps = 8;
// The grid aims at this many blocks per SM in all. The plain policies also ask the compiler for it
// (__launch_bounds__ minimum blocks, so at most 128 registers a thread): at d = 256 with a group of
// 8 they took 135, which left one block of 8 warps per SM on sm_90 and ran the planned grid in two
// waves (ptxas -v; with the bound: 128 registers and 8 bytes of spill). The general policies decode
// into shared memory and keep their 196–222 registers (one block per SM).
constexpr int kStagedBlocksPerSm = 2;
constexpr int kStagedThreads = 32 * kStagedWarps;

// Keys per staged tile for rows of at most max_row_bytes: ≤ 16 KiB of K (and as much V), ≤ 32.
__host__ __device__ constexpr int staged_keys(int max_row_bytes) {
  return 16384 / max_row_bytes < 32 ? 16384 / max_row_bytes : 32;
}
constexpr int log2_of(int n) {
  return n <= 1 ? 0 : 1 + log2_of(n / 2);
}

// A policy says how the kernel reads a tile: kKeys keys; raw rows of at most kMaxRowBytes staged in
// Units; kDecodedFloats floats of shared memory for decoded values (≥ 1); bind() (once per block:
// where the tile lives), decode() (after each tile is staged, every thread), prepare() (the query,
// every lane), dot() and add_v() of key `key` of the tile, and dim(lane, m), the head dim lane
// `lane` holds as its m-th value.
//
// The plain F16/F32 pair: lane l holds dims l·M .. l·M + M − 1, read as one vector per row straight
// from the staged rows.
template <int HD, typename T>
struct StagedPlain {
  static constexpr int M = HD / 32;
  static constexpr int kMaxRowBytes = HD * static_cast<int>(sizeof(T));
  static constexpr int kKeys = staged_keys(kMaxRowBytes);
  static constexpr int kDecodedFloats = 1;
  static constexpr int kMinBlocksPerSm = kStagedBlocksPerSm;
  using Unit = uint4;  // staged in 16-byte pieces
  const uint8_t* sk = nullptr;
  const uint8_t* sv = nullptr;
  __device__ explicit StagedPlain(const AttentionArgs&) {}
  __device__ static constexpr int k_row_bytes() { return kMaxRowBytes; }
  __device__ static constexpr int v_row_bytes() { return kMaxRowBytes; }
  __device__ static int dim(int lane, int m) { return lane * M + m; }
  __device__ void bind(const uint8_t* raw, float*) {
    sk = raw;
    sv = raw + kKeys * kMaxRowBytes;
  }
  __device__ void decode() const {}
  __device__ void prepare(const AttentionArgs& a, float (&q)[M], int) {
#pragma unroll
    for (int m = 0; m < M; ++m) q[m] *= a.scale;
  }
  __device__ float dot(const float (&q)[M], int key, int lane) const {
    const auto piece =
        *reinterpret_cast<const RowPiece<M, T>*>(sk + key * kMaxRowBytes + lane * M * sizeof(T));
    float d = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) d += q[m] * load_kv(piece.v, m);
    return d;
  }
  __device__ void add_v(float (&acc)[M], float p, int key, int lane) const {
    const auto piece =
        *reinterpret_cast<const RowPiece<M, T>*>(sv + key * kMaxRowBytes + lane * M * sizeof(T));
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] += p * load_kv(piece.v, m);
  }
};

// Any other pair: the staged raw rows are decoded once per tile into floats (kv_value, each value
// by one thread), which the warps read as dims lane + 32m (conflict-free); the query is rotated and
// rounded as llama.cpp's CPU flash attention does (prepare_query), and for a Q4_1/Q5_1 K lanes
// below M add block `lane`'s min term from the raw row (MinTerm). kWide: a pair with an F32, F16
// or BF16 side (raw rows up to 4 bytes a value: half the keys per tile); otherwise both sides are
// 32-value block types (at most Q8_0's 34 bytes per 32 values).
template <int HD, bool kWide>
struct StagedAny {
  static constexpr int M = HD / 32;
  static constexpr int kMaxRowBytes = kWide ? HD * 4 : HD / 32 * 34;
  static constexpr int kKeys = staged_keys(kWide ? HD * 8 : HD * 4);  // decoded tile ≤ 32 KiB
  static constexpr int kDecodedFloats = 2 * kKeys * HD;
  static constexpr int kMinBlocksPerSm = 1;
  using Unit = uint32_t;  // staged in 4-byte words (rows are whole words: staged_plan)
  GgmlType kt, vt;
  int kb, vb;
  MinTerm mt;
  const uint8_t* raw = nullptr;
  float* val = nullptr;
  __device__ explicit StagedAny(const AttentionArgs& a)
      : kt(a.k_type),
        vt(a.v_type),
        kb(static_cast<int>(detail::kv_head_bytes(a.k_type, HD))),
        vb(static_cast<int>(detail::kv_head_bytes(a.v_type, HD))) {}
  __device__ int k_row_bytes() const { return kb; }
  __device__ int v_row_bytes() const { return vb; }
  __device__ static int dim(int lane, int m) { return lane + 32 * m; }
  __device__ void bind(const uint8_t* r, float* v) {
    raw = r;
    val = v;
  }
  __device__ void decode() const {
    for (int e = threadIdx.x; e < 2 * kKeys * HD; e += blockDim.x) {
      const int row = e / HD, d = e % HD;
      val[e] = row < kKeys ? detail::kv_value(kt, raw + row * kb, d)
                           : detail::kv_value(vt, raw + kKeys * kb + (row - kKeys) * vb, d);
    }
  }
  __device__ void prepare(const AttentionArgs& a, float (&q)[M], int lane) {
    prepare_query<AnyCache<HD>>(a, q, lane, mt);
  }
  __device__ float dot(const float (&q)[M], int key, int lane) const {
    const float* k = val + key * HD;
    float d = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) d += q[m] * k[lane + 32 * m];
    if (mt.on && lane < M) d += mt.fix * detail::kv_block_min(kt, raw + key * kb, lane);
    return d;
  }
  __device__ void add_v(float (&acc)[M], float p, int key, int lane) const {
    const float* v = val + (kKeys + key) * HD;
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] += p * v[lane + 32 * m];
  }
};

// v[0..N) are one lane's partial sums of N keys; after the call v[0] holds key (lane >> (5 −
// log2 N))'s full sum over the warp. Each stage pairs lane with lane ^ o: the lane with bit o clear
// keeps the lower half of its values and adds its partner's lower half, the other the upper half;
// once one value is left, the remaining stages are a plain butterfly sum.
template <int N>
__device__ __forceinline__ float transpose_sum(float (&v)[N], int lane) {
  int c = N;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if (c > 1) {
      const int half = c / 2;
      const bool upper = lane & o;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        if (i >= half) break;
        const float send = upper ? v[i] : v[i + half];
        const float keep = upper ? v[i + half] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
      }
      c = half;
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    }
  }
  return v[0];
}

// grid (n_head_kv, n_tokens, n_split), kStagedWarps warps; keys_per_split a multiple of the tile.
template <int HD, int G, class P>
__global__ void __launch_bounds__(kStagedThreads, P::kMinBlocksPerSm)
    attention_staged_kernel(AttentionArgs a, int n_split, int64_t keys_per_split) {
  FERRY_PDL_WAIT();
  constexpr int M = HD / 32;
  constexpr int kKeys = P::kKeys;
  constexpr int NG = kStagedWarps / G;  // warps per head: each takes N keys of the tile
  constexpr int N = kKeys / NG;
  constexpr int SH = 5 - log2_of(N);  // lane l ends with key l >> SH of its N
  using Unit = typename P::Unit;
  constexpr int kRawBytes = 2 * kKeys * P::kMaxRowBytes;
  constexpr int kUnitsPerThread =
      (kRawBytes / static_cast<int>(sizeof(Unit)) + kStagedThreads - 1) / kStagedThreads;
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "keys per warp: a power of two up to 32");
  static_assert(kStagedWarps * HD * 4 <= kRawBytes, "the merge reuses the staged rows");
  alignas(32) __shared__ uint8_t sm_raw[kRawBytes];
  __shared__ float sm_val[P::kDecodedFloats];
  __shared__ float sm_m[kStagedWarps], sm_l[kStagedWarps];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hi = warp % G, part_of = warp / G;
  const int g = blockIdx.x, split = blockIdx.z;
  const int64_t t = blockIdx.y;
  const int64_t n_vis = first_position(a) + t + 1;
  const int64_t begin = split * keys_per_split;
  const int64_t end = min(n_vis, begin + keys_per_split);
  const auto* kc = static_cast<const uint8_t*>(a.k_cache);
  const auto* vc = static_cast<const uint8_t*>(a.v_cache);
  P pol(a);
  pol.bind(sm_raw, sm_val);
  const int kb = pol.k_row_bytes(), vb = pol.v_row_bytes();
  const int ku = kb / static_cast<int>(sizeof(Unit)), vu = vb / static_cast<int>(sizeof(Unit));
  const int k_units = kKeys * ku, all_units = kKeys * (ku + vu);

  float q[M], acc[M];
  const float* qh = a.q + t * a.q_ld_token + int64_t{g * G + hi} * a.q_ld_head;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    q[m] = qh[P::dim(lane, m)];
    acc[m] = 0.f;
  }
  pol.prepare(a, q, lane);
  // The tile of keys j0 .. j0 + kKeys − 1 (past `end`: the last key again, masked below), K rows
  // then V rows, packed at their own row sizes.
  Unit stage[kUnitsPerThread];
  auto fetch = [&](int64_t j0) {
#pragma unroll
    for (int i = 0; i < kUnitsPerThread; ++i) {
      const int c = tid + i * kStagedThreads;
      if (c >= all_units) break;
      const bool is_k = c < k_units;
      const int rem = is_k ? c : c - k_units, per_row = is_k ? ku : vu;
      const int64_t j = min(j0 + rem / per_row, end - 1);
      const uint8_t* row = (is_k ? kc : vc) + (j * a.n_head_kv + g) * (is_k ? kb : vb);
      stage[i] = reinterpret_cast<const Unit*>(row)[rem % per_row];
    }
  };
  auto put = [&] {
#pragma unroll
    for (int i = 0; i < kUnitsPerThread; ++i) {
      const int c = tid + i * kStagedThreads;
      if (c >= all_units) break;
      reinterpret_cast<Unit*>(sm_raw)[c] = stage[i];
    }
  };

  float mx = -INFINITY, l = 0.f;
  if (begin < end) fetch(begin);
  for (int64_t j0 = begin; j0 < end; j0 += kKeys) {
    __syncthreads();  // every warp is done with the previous tile
    put();
    __syncthreads();
    if (j0 + kKeys < end) fetch(j0 + kKeys);  // in flight while this tile is used
    pol.decode();
    __syncthreads();
    const int k0 = part_of * N;
    float v[N];
#pragma unroll
    for (int jj = 0; jj < N; ++jj) v[jj] = pol.dot(q, k0 + jj, lane);
    const float total = transpose_sum(v, lane);  // every lane takes part in the shuffles
    const int64_t key = j0 + k0 + (lane >> SH);
    const float s = key < end ? total : -INFINITY;
    const float m_tile = detail::warp_max(s);
    if (m_tile == -INFINITY) continue;  // uniform: none of this warp's keys is visible
    const float m_new = fmaxf(mx, m_tile);
    const float corr = rescale(mx, m_new);
    const float p = key < end ? expf(s - m_new) : 0.f;
    l = l * corr + detail::warp_sum((lane & ((1 << SH) - 1)) == 0 ? p : 0.f);  // each key once
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] *= corr;
#pragma unroll
    for (int jj = 0; jj < N; ++jj)
      pol.add_v(acc, __shfl_sync(0xffffffffu, p, jj << SH), k0 + jj, lane);
    mx = m_new;
  }
  __syncthreads();  // the tile's last readers are done: the merge reuses the staged rows
  float* sm_acc = reinterpret_cast<float*>(sm_raw);  // [kStagedWarps][HD], dims in natural order
  if (lane == 0) {
    sm_m[warp] = mx;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int m = 0; m < M; ++m) sm_acc[warp * HD + P::dim(lane, m)] = acc[m];
  __syncthreads();
  for (int e = tid; e < G * HD; e += kStagedThreads) {
    const int i = e / HD, d = e % HD;
    float Mx = -INFINITY;
#pragma unroll
    for (int w = i; w < kStagedWarps; w += G) Mx = fmaxf(Mx, sm_m[w]);
    float L = 0.f, o = 0.f;
#pragma unroll
    for (int w = i; w < kStagedWarps; w += G) {
      const float wt = rescale(sm_m[w], Mx);
      L += sm_l[w] * wt;
      o += sm_acc[w * HD + d] * wt;
    }
    float* part = static_cast<float*>(a.workspace) +
                  ((t * a.n_head + g * G + i) * n_split + split) * (HD + 2);
    part[2 + d] = o;
    if (d == 0) {
      part[0] = Mx;
      part[1] = L;
    }
  }
}

// The device's SM count, asked once per device.
int sm_count() {
  static std::atomic<int> cached[64];
  int dev = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  std::atomic<int>& c = cached[dev & 63];
  int n = c.load(std::memory_order_relaxed);
  if (n == 0) {
    FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    c.store(n, std::memory_order_relaxed);
  }
  return n;
}

// A general pair with a side of 2 or 4 bytes a value (StagedAny's kWide).
bool staged_wide(const AttentionArgs& a) {
  return type_info(a.k_type).block_values == 1 || type_info(a.v_type).block_values == 1;
}

struct StagedPlan {
  int n_split = 0;  // 0: the staged kernel does not apply
  int64_t keys_per_split = 0;
};

// Where it applies: decode (≤ kAttentionRowsMaxTokens tokens), groups of 2, 4 or 8 query heads per
// KV head, a workspace, rows the staging can copy (plain caches 16-byte aligned; other pairs in
// whole 4-byte words). Splits of whole tiles, at least two tiles each, enough blocks for
// kStagedBlocksPerSm per SM, no more than the workspace holds.
StagedPlan staged_plan(const AttentionArgs& a) {
  StagedPlan p;
  const int group = a.n_head / a.n_head_kv;
  if (a.n_tokens > kAttentionRowsMaxTokens || (group != 2 && group != 4 && group != 8) ||
      !a.workspace)
    return p;
  const auto address =
      reinterpret_cast<uintptr_t>(a.k_cache) | reinterpret_cast<uintptr_t>(a.v_cache);
  const CacheKind kind = cache_kind(a);
  int64_t tile = 0;  // the policy's kKeys
  if (kind == CacheKind::any) {
    const int64_t kb = detail::kv_head_bytes(a.k_type, a.head_dim),
                  vb = detail::kv_head_bytes(a.v_type, a.head_dim);
    if ((kb | vb | static_cast<int64_t>(address)) & 3) return p;
    tile = staged_keys(a.head_dim * (staged_wide(a) ? 8 : 4));
  } else {
    if (address & 15) return p;
    tile = staged_keys(a.head_dim * (kind == CacheKind::f16 ? 2 : 4));
  }
  const int64_t n_kv = a.p0 + a.n_tokens;
  const size_t per_split =
      static_cast<size_t>(a.n_tokens) * a.n_head * (a.head_dim + 2) * sizeof(float);
  const int64_t blocks = int64_t{a.n_head_kv} * a.n_tokens;
  const int64_t n = std::min({(int64_t{kStagedBlocksPerSm} * sm_count() + blocks - 1) / blocks,
                              (n_kv + 2 * tile - 1) / (2 * tile),
                              static_cast<int64_t>(a.workspace_bytes / per_split)});
  if (n < 1) return p;
  p.keys_per_split = ((n_kv + n - 1) / n + tile - 1) / tile * tile;
  p.n_split = static_cast<int>((n_kv + p.keys_per_split - 1) / p.keys_per_split);
  return p;
}

template <int HD, int G>
void launch_staged(const AttentionArgs& a, dim3 grid, const StagedPlan& p, cudaStream_t stream) {
  switch (cache_kind(a)) {
    case CacheKind::f16:
      launch(attention_staged_kernel<HD, G, StagedPlain<HD, __half>>, grid, kStagedThreads, 0,
             stream, a, p.n_split, p.keys_per_split);
      break;
    case CacheKind::f32:
      launch(attention_staged_kernel<HD, G, StagedPlain<HD, float>>, grid, kStagedThreads, 0,
             stream, a, p.n_split, p.keys_per_split);
      break;
    case CacheKind::any:
      if (staged_wide(a))
        launch(attention_staged_kernel<HD, G, StagedAny<HD, true>>, grid, kStagedThreads, 0, stream,
               a, p.n_split, p.keys_per_split);
      else
        launch(attention_staged_kernel<HD, G, StagedAny<HD, false>>, grid, kStagedThreads, 0,
               stream, a, p.n_split, p.keys_per_split);
      break;
  }
}

}  // namespace

bool attention_staged_applies(const AttentionArgs& a) {
  return staged_plan(a).n_split > 0;
}

void attention_staged(const AttentionArgs& a, cudaStream_t stream) {
  const char* op = "attention_staged";
  check_args(op, a);
  const StagedPlan p = staged_plan(a);
  if (p.n_split == 0) return attention_split(a, stream);
  const int group = a.n_head / a.n_head_kv;
  const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(a.n_tokens),
                  static_cast<unsigned>(p.n_split));
  FERRY_DISPATCH_HEAD_DIM(a.head_dim, op, {
    if (group == 2)
      launch_staged<kHD, 2>(a, grid, p, stream);
    else if (group == 4)
      launch_staged<kHD, 4>(a, grid, p, stream);
    else
      launch_staged<kHD, 8>(a, grid, p, stream);
    FERRY_CUDA_CHECK_LAUNCH("attention_staged_kernel");
    launch_reduce<kHD>(a, p.n_split, stream);
  });
}

}  // namespace ferry::cuda
