#include <algorithm>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/deltanet.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/norm_device.cuh"

namespace ferry::cuda {
namespace {

// grid (H_v, ⌈S/32⌉), block of kRowWarps warps. Lane owns value column j; warp w owns key rows
// [w·S/kRowWarps, (w+1)·S/kRowWarps) of that column in registers, so a head's state is spread
// over 4·⌈S/32⌉ warps (enough of them in flight to hide memory latency at decode) and stays in
// registers across all tokens of the call. Per token the two reductions over key rows (Sᵀk and
// Sᵀq) combine the warps' partial sums through shared memory.
constexpr int kRowWarps = 4;

// GdnArgs' gated-norm epilogue for head h: the head's blocks (grid.y of them) count themselves in
// after their outputs are written; the last one normalises the head's rows, one warp per token.
__device__ __forceinline__ void norm_in_last_block(const GdnArgs& a, int h, int S) {
  __shared__ bool last;
  __syncthreads();  // the block's output columns are written
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(a.counters + h, 1u) == gridDim.y - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int64_t t = threadIdx.x >> 5; t < a.n_tokens; t += blockDim.x >> 5) {
    float* o = a.out + t * a.ldo + int64_t{h} * S;
    detail::norm_row<detail::NormKind::rms_gated, true>(o, a.norm_w, a.z + t * a.ldz + int64_t{h} * S, o, S, a.eps,
                                                        1.f);
  }
  if (threadIdx.x == 0) a.counters[h] = 0;
}

template <int S>
__global__ void __launch_bounds__(32 * kRowWarps) gdn_rule_kernel(GdnArgs a) {
  FERRY_PDL_WAIT();
  constexpr int R = S / kRowWarps;  // key rows per warp
  __shared__ float ks[S], qs[S];
  __shared__ float part[kRowWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.x;
  const int j = blockIdx.y * 32 + lane;
  const bool active = j < S;
  const int i0 = warp * R;
  const int kh = a.key_head_tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  float* st = a.state + int64_t{h} * S * S;
  float s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) s[r] = active ? st[int64_t{i0 + r} * S + j] : 0.f;

  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const float* kt = a.k + t * a.ldk + int64_t{kh} * S;
    const float* qt = a.q + t * a.ldq + int64_t{kh} * S;
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
      ks[i] = kt[i];
      qs[i] = qt[i];
    }
    const float decay = expf(a.g[t * a.n_v_heads + h]);
    const float b = a.beta[t * a.n_v_heads + h];
    const float vj = active ? a.v[t * a.ldv + int64_t{h} * S + j] : 0.f;
    __syncthreads();  // ks/qs ready; previous token's part[] reads done
    float sk = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r] *= decay;
      sk += s[r] * ks[i0 + r];
    }
    part[warp][lane] = sk;
    __syncthreads();
    sk = 0.f;
#pragma unroll
    for (int w = 0; w < kRowWarps; ++w) sk += part[w][lane];
    const float delta = b * (vj - sk);
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r] += ks[i0 + r] * delta;
      o += s[r] * qs[i0 + r];
    }
    __syncthreads();  // everyone has read part[] (sk) before it is reused for o
    part[warp][lane] = o;
    __syncthreads();
    if (warp == 0 && active) {
      float out = 0.f;
#pragma unroll
      for (int w = 0; w < kRowWarps; ++w) out += part[w][lane];
      a.out[t * a.ldo + int64_t{h} * S + j] = out * a.scale;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (active) st[int64_t{i0 + r} * S + j] = s[r];
  if (a.counters) norm_in_last_block(a, h, S);
}

// ---- Chunked form (prefill) -------------------------------------------------------------------
// The math of kernels/cpu/gdn_core_impl.hpp chunk(), its spec: within a chunk of n ≤ 64 tokens
// starting from state S0, with c_t = Σ_{s≤t} g_s and Γ_t = e^{c_t},
//   δ = U + W·S0,  U = T·diag(β)·V,  W = T·diag(−βΓ)·K,  T = (I + L)⁻¹,
//       L[t][s] = β_t e^{c_t − c_s} k_t·k_s (s < t)
//   O = scale·diag(Γ)·Q·S0 + P·δ,  P[t][s] = scale·e^{c_t − c_s} q_t·k_s (s ≤ t)
//   S ← Γ_{n−1}·S0 + Kdᵀ·δ,  Kd[s] = e^{c_{n−1} − c_s} k_s
// Decay ratios are always e^{difference} ≤ 1, never quotients of Γ (which underflow for strong
// decay; Γ itself may underflow to 0, which is then the true size of S0's contribution).
//
// Two kernels, because only the second half depends on the state:
//  1. gdn_chunk_prep_kernel, grid (chunks, H_v), all chunks of all heads at once: c, K·Kᵀ, Q·Kᵀ,
//     T by forward substitution, and U, W, P into a global scratch.
//  2. gdn_chunk_state_kernel, grid (H_v, S/32): a block owns 32 value columns of one head's
//     state and walks the chunks in order: δ, O and the state update are small GEMMs against
//     those columns. The state slice lives in shared memory, not registers as in gdn_rule_kernel,
//     because W·S0 and Q·S0 reduce over the key rows: every thread reads every row of its column.
// The shared memory of both stays under the 48 KiB of static shared memory (no opt-in needed).
// Tiles are 32 floats wide (16 for S = 16) so a warp reads one row of a tile (broadcast) against
// 32 consecutive columns (no bank conflicts).
constexpr int kChunk = 64;          // tokens per chunk, as cpu::kGdnChunk
constexpr int kChunkThreads = 256;  // threads per block of both chunk kernels

// Scratch of one (chunk, value head), floats:
//   u (C, S) | w (C, S) | p (C, C) | gamma (C): Γ_t | dec_end (C): e^{c_{n−1} − c_t} (0 for t ≥ n)
__host__ __device__ constexpr int64_t chunk_scratch_floats(int S) {
  return 2 * int64_t{kChunk} * S + int64_t{kChunk} * kChunk + 2 * kChunk;
}

// At least 2 blocks per SM (≤ 128 registers; ptxas takes ~150 unbounded, for a few bytes of spill
// with the bound): 512 tokens × 32 heads are 256 blocks, one wave on a 132-SM H200 this way, two
// otherwise. Unmeasured, as everything about the chunked kernels' speed.
template <int S>
__global__ void __launch_bounds__(kChunkThreads, 2) gdn_chunk_prep_kernel(GdnArgs a, float* scratch,
                                                                      int64_t n_chunks) {
  FERRY_PDL_WAIT();
  constexpr int C = kChunk, NT = kChunkThreads;
  constexpr int KT = S < 32 ? S : 32;       // tile width over the key / value dimension
  constexpr int KP = KT + 1;                // padded row: column reads kt[s][i] conflict-free
  constexpr int RG = NT / C, RM = C / RG;   // K·Kᵀ: thread owns column s, rows rg + RG·m
  constexpr int JG = NT / KT, JM = C / JG;  // U, W: thread owns column j, rows jg + JG·m
  static_assert(2 * C * KP <= 2 * C * C && 2 * C * KT <= C * C, "tiles must fit in big[]");
  static_assert(NT >= C && C * KT % NT == 0, "whole load rounds");
  // Phase 1: key tiles kt, qt (C, KP). Phase 2: L (C, C) and T (C, C). Phase 3: T stays, the
  // β-scaled value and −βΓ-scaled key tiles (C, KT) each take L's place.
  __shared__ float big[2 * C * C];
  __shared__ float cum[C], beta[C], gamma[C];
  const int tid = threadIdx.x;
  const int64_t c = blockIdx.x;
  const int h = blockIdx.y;
  const int kh = a.key_head_tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  const int64_t t0 = c * C;
  const int n = a.n_tokens - t0 < C ? static_cast<int>(a.n_tokens - t0) : C;
  float* sc = scratch + (int64_t{h} * n_chunks + c) * chunk_scratch_floats(S);
  float* u = sc;
  float* w = sc + C * S;
  float* p = sc + 2 * C * S;
  float* gamma_out = p + C * C;
  float* dec_end_out = gamma_out + C;
  const float* kc = a.k + t0 * a.ldk + int64_t{kh} * S;  // (n, S) rows of this chunk, stride ldk
  const float* qc = a.q + t0 * a.ldq + int64_t{kh} * S;
  const float* vc = a.v + t0 * a.ldv + int64_t{h} * S;

  // Thread-dependent branches stay within one barrier interval, none sits in a loop with a
  // barrier, and tile loads run a fixed trip count: g++ may duplicate a barrier call when it
  // threads two branches on one condition across it or unswitches a loop on a loop-invariant
  // condition such as tid < C, which the emulator (tests/cuda_emu) reports as a divergent barrier.
  if (tid == 0) {  // c_t summed in token order, as the CPU (64 adds: not worth a scan)
    float acc = 0.f;
    for (int t = 0; t < C; ++t) {
      if (t < n) acc += a.g[(t0 + t) * a.n_v_heads + h];
      cum[t] = t < n ? acc : 0.f;
      gamma[t] = gamma_out[t] = expf(cum[t]);
    }
    for (int t = 0; t < C; ++t) dec_end_out[t] = t < n ? expf(cum[n - 1] - cum[t]) : 0.f;
  }
  if (tid < C) beta[tid] = tid < n ? a.beta[(t0 + tid) * a.n_v_heads + h] : 0.f;
  __syncthreads();

  // Phase 1: K·Kᵀ and Q·Kᵀ, (n × S)·(S × n), over key tiles.
  float* kt = big;
  float* qt = big + C * KP;
  const int s_col = tid % C, rg = tid / C;
  float kk[RM], qk[RM];
#pragma unroll
  for (int m = 0; m < RM; ++m) kk[m] = qk[m] = 0.f;
  for (int i0 = 0; i0 < S; i0 += KT) {
    __syncthreads();  // the previous tile is read
    for (int r = 0; r < C * KT / NT; ++r) {
      const int e = r * NT + tid;
      const int t = e / KT, i = e % KT;
      kt[t * KP + i] = t < n ? kc[t * a.ldk + i0 + i] : 0.f;
      qt[t * KP + i] = t < n ? qc[t * a.ldq + i0 + i] : 0.f;
    }
    __syncthreads();
#pragma unroll 4
    for (int i = 0; i < KT; ++i) {
      const float ks = kt[s_col * KP + i];
#pragma unroll
      for (int m = 0; m < RM; ++m) {
        kk[m] += kt[(rg + RG * m) * KP + i] * ks;
        qk[m] += qt[(rg + RG * m) * KP + i] * ks;
      }
    }
  }
  __syncthreads();  // the key tiles are read before L and T overwrite them

  // Phase 2: L (strictly lower) into shared memory, P (lower with diagonal) to the scratch.
  float* lm = big;
  float* tm = big + C * C;
#pragma unroll
  for (int m = 0; m < RM; ++m) {
    const int t = rg + RG * m, s = s_col;
    const float dec = s <= t && t < n ? expf(cum[t] - cum[s]) : 0.f;
    lm[t * C + s] = s < t ? beta[t] * dec * kk[m] : 0.f;
    p[t * C + s] = qk[m] * (dec * a.scale);
  }
  __syncthreads();

  // T = (I + L)⁻¹. Column x solves (I + L)·T[:, x] = e_x by forward substitution, independently of
  // the other columns: one thread per column, no barriers; T[t][x] = 0 for t < x. Same order of
  // operations as the CPU's row-wise substitution (m ascending).
  if (tid < C) {
    const int x = tid;
    for (int t = 0; t < C; ++t) {
      float acc = t == x ? 1.f : 0.f;
      if (t < n)
        for (int m = x; m < t; ++m) acc -= lm[t * C + m] * tm[m * C + x];
      tm[t * C + x] = t < n ? acc : 0.f;
    }
  }

  // Phase 3: U = T·(diag(β)·V) and W = T·(diag(−βΓ)·K), over value-column tiles.
  float* vt = big;           // (C, KT): β_x·v_x
  float* kd = big + C * KT;  // (C, KT): −β_xΓ_x·k_x
  const int j = tid % KT, jg = tid / KT;
  for (int j0 = 0; j0 < S; j0 += KT) {
    __syncthreads();  // T complete (first tile) / the previous tile is read
    for (int r = 0; r < C * KT / NT; ++r) {
      const int e = r * NT + tid;
      const int x = e / KT, jj = e % KT;
      vt[e] = x < n ? beta[x] * vc[x * a.ldv + j0 + jj] : 0.f;
      kd[e] = x < n ? (-beta[x] * gamma[x]) * kc[x * a.ldk + j0 + jj] : 0.f;
    }
    __syncthreads();
    float au[JM], aw[JM];
#pragma unroll
    for (int m = 0; m < JM; ++m) au[m] = aw[m] = 0.f;
    for (int x = 0; x < n; ++x) {
      const float vx = vt[x * KT + j], kx = kd[x * KT + j];
#pragma unroll
      for (int m = 0; m < JM; ++m) {
        const float tv = tm[(jg + JG * m) * C + x];  // 0 above the diagonal
        au[m] += tv * vx;
        aw[m] += tv * kx;
      }
    }
#pragma unroll
    for (int m = 0; m < JM; ++m) {
      const int t = jg + JG * m;
      u[t * S + j0 + j] = au[m];
      w[t * S + j0 + j] = aw[m];
    }
  }
}

template <int S>
__global__ void __launch_bounds__(kChunkThreads) gdn_chunk_state_kernel(GdnArgs a, const float* scratch,
                                                                       int64_t n_chunks) {
  FERRY_PDL_WAIT();
  constexpr int C = kChunk, NT = kChunkThreads;
  constexpr int JB = S < 32 ? S : 32;  // value columns per block, and the tile width
  constexpr int RG = NT / JB;          // thread owns column j, rows rg + RG·m
  constexpr int RO = C / RG;           // rows of a (C, JB) result per thread
  constexpr int RK = JB / RG;          // rows of a (JB, JB) state tile per thread
  static_assert(RK >= 1 && S % JB == 0 && C * JB % NT == 0 && S * JB % NT == 0 && NT >= C, "tile shape");
  __shared__ float st[S * JB];  // (S, JB) the block's state columns, across all chunks
  __shared__ float dl[C * JB];  // (C, JB) δ of the chunk
  __shared__ float wt[C * JB];  // (C, JB) tile: W, then P, then Kd
  __shared__ float qt[C * JB];  // (C, JB) tile: Q
  const int tid = threadIdx.x, j = tid % JB, rg = tid / JB;
  const int h = blockIdx.x, j0 = blockIdx.y * JB;
  const int kh = a.key_head_tiled ? h % a.n_k_heads : h / (a.n_v_heads / a.n_k_heads);
  float* state = a.state + int64_t{h} * S * S;
  for (int r = 0; r < S * JB / NT; ++r) {
    const int e = r * NT + tid;
    st[e] = state[int64_t{e / JB} * S + j0 + e % JB];
  }

  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t t0 = c * C;
    const int n = a.n_tokens - t0 < C ? static_cast<int>(a.n_tokens - t0) : C;
    const float* sc = scratch + (int64_t{h} * n_chunks + c) * chunk_scratch_floats(S);
    const float* u = sc;
    const float* w = sc + C * S;
    const float* p = sc + 2 * C * S;
    const float* kc = a.k + t0 * a.ldk + int64_t{kh} * S;
    const float* qc = a.q + t0 * a.ldq + int64_t{kh} * S;
    // Read from the scratch rather than staged in shared memory: a `tid < C` branch in this loop
    // is what g++ unswitches (see the note in gdn_chunk_prep_kernel).
    const float* gamma = p + C * C;
    const float* dec_end = gamma + C;
    const float g_end = gamma[n - 1];

    // Rows t ≥ n of the last chunk: U, W and dec_end are 0 there (the scratch is written in full),
    // so δ's rows are 0; q and k rows are clamped to n − 1 (in bounds; q's only reach rows of O
    // that are not stored, k's are scaled by dec_end = 0). Branch-free loads: a `t < n` condition
    // here would match the one on the output store, and g++ threads such pairs across the barrier
    // between them (see the note in gdn_chunk_prep_kernel).
    // δ = U + W·S0 and Q·S0, over key tiles.
    float ad[RO], ao[RO];
#pragma unroll
    for (int m = 0; m < RO; ++m) {
      ad[m] = u[(rg + RG * m) * S + j0 + j];
      ao[m] = 0.f;
    }
    for (int i0 = 0; i0 < S; i0 += JB) {
      __syncthreads();  // the previous tile (or chunk) is read
      for (int r = 0; r < C * JB / NT; ++r) {
        const int e = r * NT + tid;
        const int t = e / JB, i = e % JB;
        wt[e] = w[t * S + i0 + i];
        qt[e] = qc[min(t, n - 1) * a.ldq + i0 + i];
      }
      __syncthreads();
#pragma unroll 4
      for (int i = 0; i < JB; ++i) {
        const float sv = st[(i0 + i) * JB + j];
#pragma unroll
        for (int m = 0; m < RO; ++m) {
          ad[m] += wt[(rg + RG * m) * JB + i] * sv;
          ao[m] += qt[(rg + RG * m) * JB + i] * sv;
        }
      }
    }
#pragma unroll
    for (int m = 0; m < RO; ++m) dl[(rg + RG * m) * JB + j] = ad[m];

    // O = scale·Γ_t·(Q·S0) + P·δ, over column tiles of P (P is 0 above the diagonal, δ beyond n).
#pragma unroll
    for (int m = 0; m < RO; ++m) ao[m] *= gamma[rg + RG * m] * a.scale;
    for (int s0 = 0; s0 < n; s0 += JB) {
      __syncthreads();  // δ complete / the previous tile is read
      for (int r = 0; r < C * JB / NT; ++r) {
        const int e = r * NT + tid;
        wt[e] = p[(e / JB) * C + s0 + e % JB];
      }
      __syncthreads();
#pragma unroll 4
      for (int s = 0; s < JB; ++s) {
        const float dv = dl[(s0 + s) * JB + j];
#pragma unroll
        for (int m = 0; m < RO; ++m) ao[m] += wt[(rg + RG * m) * JB + s] * dv;
      }
    }
#pragma unroll
    for (int m = 0; m < RO; ++m) {
      const int t = rg + RG * m;
      if (t < n) a.out[(t0 + t) * a.ldo + int64_t{h} * S + j0 + j] = ao[m];
    }

    // S ← Γ_{n−1}·S0 + Kdᵀ·δ, over key-row tiles; each thread updates its own entries only.
    for (int i0 = 0; i0 < S; i0 += JB) {
      __syncthreads();  // the previous tile is read (first: δ complete)
      for (int r = 0; r < C * JB / NT; ++r) {
        const int e = r * NT + tid;
        const int t = e / JB;
        wt[e] = kc[min(t, n - 1) * a.ldk + i0 + e % JB] * dec_end[t];
      }
      __syncthreads();
#pragma unroll
      for (int m = 0; m < RK; ++m) {
        const int i = rg + RG * m;
        float acc = st[(i0 + i) * JB + j] * g_end;
        for (int t = 0; t < n; ++t) acc += wt[t * JB + i] * dl[t * JB + j];
        st[(i0 + i) * JB + j] = acc;
      }
    }
  }
  __syncthreads();
  for (int r = 0; r < S * JB / NT; ++r) {
    const int e = r * NT + tid;
    state[int64_t{e / JB} * S + j0 + e % JB] = st[e];
  }
}

// One thread per channel walks the tokens with the window in registers.
template <int K>
__global__ void conv_silu_kernel(const float* __restrict__ x, int64_t ldx, const float* __restrict__ w,
                                 float* state, float* __restrict__ y, int64_t ldy, int64_t n_tokens,
                                 int64_t n_ch) {
  FERRY_PDL_WAIT();
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= n_ch) return;
  float win[K];  // win[0] oldest
  float wc[K];
#pragma unroll
  for (int k = 0; k < K - 1; ++k) win[k] = state[k * n_ch + c];
#pragma unroll
  for (int k = 0; k < K; ++k) wc[k] = w[c * K + k];
  for (int64_t t = 0; t < n_tokens; ++t) {
    win[K - 1] = x[t * ldx + c];
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc += wc[k] * win[k];
    y[t * ldy + c] = acc / (1.f + expf(-acc));
#pragma unroll
    for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
  }
#pragma unroll
  for (int k = 0; k < K - 1; ++k) state[k * n_ch + c] = win[k];
}

__global__ void gates_kernel(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
                             const float* dt_bias, const float* ssm_a, float* beta, float* g,
                             int64_t ld_out, int64_t n_tokens, int n_heads) {
  FERRY_PDL_WAIT();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_tokens * n_heads) return;
  const int64_t t = i / n_heads;
  const int h = static_cast<int>(i % n_heads);
  beta[t * ld_out + h] = 1.f / (1.f + expf(-b_raw[t * ldb + h]));
  const float x = a_raw[t * lda + h] + dt_bias[h];
  const float sp = x > 20.f ? x : logf(1.f + expf(x));
  g[t * ld_out + h] = ssm_a[h] * sp;
}

void check_rule_args(const GdnArgs& a, const char* op) {
  require(a.q && a.k && a.v && a.g && a.beta && a.state && a.out, op, "null pointer argument");
  require(a.n_k_heads >= 1 && a.n_v_heads >= 1 && a.n_v_heads % a.n_k_heads == 0 && a.n_v_heads <= 65535, op,
          "H_v (" + std::to_string(a.n_v_heads) + ") must be a positive multiple of H_k (" +
              std::to_string(a.n_k_heads) + ")");
  const int64_t kw = int64_t{a.n_k_heads} * a.head_dim, vw = int64_t{a.n_v_heads} * a.head_dim;
  require(a.ldq >= kw && a.ldk >= kw && a.ldv >= vw && a.ldo >= vw, op, "token strides below the row width");
}

}  // namespace

void gdn_delta_rule(const GdnArgs& a, cudaStream_t stream) {
  const char* op = "gdn_delta_rule";
  check_rule_args(a, op);
  require(!a.counters || (a.z && a.norm_w && a.ldz >= int64_t{a.n_v_heads} * a.head_dim), op,
          "the gated norm needs z (token stride ≥ H_v·S) and its weight");
  if (a.n_tokens <= 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_v_heads), static_cast<unsigned>((a.head_dim + 31) / 32));
  switch (a.head_dim) {
    case 16: launch(gdn_rule_kernel<16>, grid, 32 * kRowWarps, 0, stream, a); break;
    case 32: launch(gdn_rule_kernel<32>, grid, 32 * kRowWarps, 0, stream, a); break;
    case 64: launch(gdn_rule_kernel<64>, grid, 32 * kRowWarps, 0, stream, a); break;
    case 128: launch(gdn_rule_kernel<128>, grid, 32 * kRowWarps, 0, stream, a); break;
    default:
      throw_unsupported(std::string(op) + ": head_dim " + std::to_string(a.head_dim) + " (supported: 16, 32, 64, 128)");
  }
  FERRY_CUDA_CHECK_LAUNCH("gdn_rule_kernel");
}

size_t gdn_chunked_scratch_bytes(const GdnArgs& a) {
  const int64_t n = a.n_tokens < kGdnChunkedMaxTokens ? a.n_tokens : kGdnChunkedMaxTokens;
  if (n <= 0 || a.n_v_heads <= 0 || a.head_dim <= 0) return 0;
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  return static_cast<size_t>(n_chunks * a.n_v_heads * chunk_scratch_floats(a.head_dim)) * sizeof(float);
}

void gdn_delta_rule_chunked(const GdnArgs& a, float* scratch, cudaStream_t stream) {
  const char* op = "gdn_delta_rule_chunked";
  check_rule_args(a, op);
  require(scratch != nullptr, op, "null scratch");
  require(!a.counters, op, "the gated-norm epilogue is gdn_delta_rule's only");
  if (a.n_tokens <= 0) return;
  // Passes of at most kGdnChunkedMaxTokens tokens bound the scratch; the state carries over.
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kGdnChunkedMaxTokens) {
    GdnArgs p = a;
    p.n_tokens = a.n_tokens - t0 < kGdnChunkedMaxTokens ? a.n_tokens - t0 : kGdnChunkedMaxTokens;
    p.q += t0 * a.ldq;
    p.k += t0 * a.ldk;
    p.v += t0 * a.ldv;
    p.g += t0 * a.n_v_heads;
    p.beta += t0 * a.n_v_heads;
    p.out += t0 * a.ldo;
    const int64_t n_chunks = (p.n_tokens + kChunk - 1) / kChunk;
    const dim3 prep_grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>(a.n_v_heads));
    const dim3 state_grid(static_cast<unsigned>(a.n_v_heads), static_cast<unsigned>((a.head_dim + 31) / 32));
    switch (a.head_dim) {
#define FERRY_GDN_CHUNKED_CASE(S)                                                                 \
  case S:                                                                                         \
    launch(gdn_chunk_prep_kernel<S>, prep_grid, kChunkThreads, 0, stream, p, scratch, n_chunks);   \
    FERRY_CUDA_CHECK_LAUNCH("gdn_chunk_prep_kernel"); \
    launch(gdn_chunk_state_kernel<S>, state_grid, kChunkThreads, 0, stream, p, scratch, n_chunks); \
    FERRY_CUDA_CHECK_LAUNCH("gdn_chunk_state_kernel");                                            \
    break;
      FERRY_GDN_CHUNKED_CASE(16)
      FERRY_GDN_CHUNKED_CASE(32)
      FERRY_GDN_CHUNKED_CASE(64)
      FERRY_GDN_CHUNKED_CASE(128)
#undef FERRY_GDN_CHUNKED_CASE
      default:
        throw_unsupported(std::string(op) + ": head_dim " + std::to_string(a.head_dim) + " (supported: 16, 32, 64, 128)");
    }
  }
}

void gdn_conv_silu(const float* x, int64_t ldx, const float* w, int kernel, float* state, float* y,
                   int64_t ldy, int64_t n_tokens, int64_t n_ch, cudaStream_t stream) {
  const char* op = "gdn_conv_silu";
  require(x && w && state && y && x != y, op, "null pointer or y aliasing x");
  require(n_ch >= 1 && ldx >= n_ch && ldy >= n_ch, op, "bad shape");
  if (n_tokens <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n_ch + 127) / 128);
  switch (kernel) {
    case 2: launch(conv_silu_kernel<2>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    case 3: launch(conv_silu_kernel<3>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    case 4: launch(conv_silu_kernel<4>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    case 5: launch(conv_silu_kernel<5>, blocks, 128, 0, stream, x, ldx, w, state, y, ldy, n_tokens, n_ch); break;
    default:
      throw_unsupported(std::string(op) + ": conv kernel " + std::to_string(kernel) + " (supported: 2..5)");
  }
  FERRY_CUDA_CHECK_LAUNCH("conv_silu_kernel");
}

void gdn_gates(const float* b_raw, int64_t ldb, const float* a_raw, int64_t lda,
               const float* dt_bias, const float* ssm_a, float* beta, float* g, int64_t ld_out,
               int64_t n_tokens, int n_heads, cudaStream_t stream) {
  require(b_raw && a_raw && dt_bias && ssm_a && beta && g && n_heads >= 1 && ldb >= n_heads && lda >= n_heads &&
              ld_out >= n_heads,
          "gdn_gates", "bad arguments");
  const int64_t n = n_tokens * n_heads;
  if (n <= 0) return;
  require((n + 255) / 256 < (1ll << 31), "gdn_gates", "too many tokens");
  launch(gates_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, b_raw, ldb, a_raw, lda, dt_bias, ssm_a,
         beta, g, ld_out, n_tokens, n_heads);
  FERRY_CUDA_CHECK_LAUNCH("gates_kernel");
}

}  // namespace ferry::cuda
