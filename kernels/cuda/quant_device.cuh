#pragma once
// Device-side decoding of weight rows, shared by matvec, matmul, MoE, dequantize and embedding
// kernels (include from .cu files only).
//
// A row of `cols` values is cut into "units": the piece one thread decodes at a time. A unit
// holds kValues values laid out as kRuns runs of kRunLen consecutive columns, so a thread reads the
// matching activations with float4 loads, and consecutive units (= consecutive lanes) cover
// neighbouring columns so a warp's activation reads stay coalesced:
//   F32   unit = 4 values  (1 run of 4)     F16/BF16 unit = 8 values (1 run of 8)
//   Q8_0  unit = half a block, 16 values (1 run of 16)
//   Q4_K/Q5_K  16 units per 256-block: unit t covers chunk c = t/4 (64 values), part p = t%4:
//              columns 64c+8p..+8 (low nibbles, sub-block 2c) and 64c+32+8p..+8 (high, 2c+1)
//   Q6_K  16 units per 256-block: unit t covers half n = t/8, l0 = 4(t%8): columns
//              128n + l0 + 32r .. +4 for r = 0..3 (the four 2-bit planes of ql/qh)
//   Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K: quant_device_more.cuh
// Units of every type tile each aligned 128-column segment exactly (8 units of 16, 16 of 8, 32 of
// 4), which the tiled matmul relies on.
// Dequantized values are computed with the same float operations, in the same order, as ggml's
// dequantize_row_* (and __fmul_rn/__fsub_rn so nvcc cannot fuse them into FMAs): bit-exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/check.cuh"
#include "runtime/core/types.hpp"

namespace ferry::cuda::detail {

__device__ __forceinline__ float fp16_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16_bits(uint16_t h) { return __uint_as_float(uint32_t{h} << 16); }
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

template <GgmlType T>
struct Unit;

template <>
struct Unit<GgmlType::F32> {
  static constexpr int kBlockValues = 1, kBlockBytes = 4;
  static constexpr int kValues = 4, kRuns = 1, kRunLen = 4;
  __device__ static int run_start(int64_t u, int r) { return static_cast<int>(u * 4); }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const float4 f = reinterpret_cast<const float4*>(row)[u];
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  }
};

template <>
struct Unit<GgmlType::F16> {
  static constexpr int kBlockValues = 1, kBlockBytes = 2;
  static constexpr int kValues = 8, kRuns = 1, kRunLen = 8;
  __device__ static int run_start(int64_t u, int r) { return static_cast<int>(u * 8); }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint4 raw = reinterpret_cast<const uint4*>(row)[u];
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = fp16_bits(static_cast<uint16_t>(w[i] & 0xFFFF));
      v[2 * i + 1] = fp16_bits(static_cast<uint16_t>(w[i] >> 16));
    }
  }
};

template <>
struct Unit<GgmlType::BF16> {
  static constexpr int kBlockValues = 1, kBlockBytes = 2;
  static constexpr int kValues = 8, kRuns = 1, kRunLen = 8;
  __device__ static int run_start(int64_t u, int r) { return static_cast<int>(u * 8); }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint4 raw = reinterpret_cast<const uint4*>(row)[u];
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = bf16_bits(static_cast<uint16_t>(w[i] & 0xFFFF));
      v[2 * i + 1] = bf16_bits(static_cast<uint16_t>(w[i] >> 16));
    }
  }
};

// block_q8_0: fp16 d, int8 qs[32] (34 bytes, only 2-byte aligned).
template <>
struct Unit<GgmlType::Q8_0> {
  static constexpr int kBlockValues = 32, kBlockBytes = 34;
  static constexpr int kValues = 16, kRuns = 1, kRunLen = 16;
  __device__ static int run_start(int64_t u, int r) { return static_cast<int>(u * 16); }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 1) * kBlockBytes;
    const float d = fp16_bits(ld_u16(b));
    const uint8_t* q = b + 2 + 16 * (u & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint16_t two = ld_u16(q + 2 * i);
      v[2 * i] = mul(static_cast<float>(static_cast<int8_t>(two & 0xFF)), d);
      v[2 * i + 1] = mul(static_cast<float>(static_cast<int8_t>(two >> 8)), d);
    }
  }
};

// block_q4_K: fp16 d, fp16 dmin, scales[12], qs[128] (144 bytes; 16-byte aligned when the row is).
template <>
struct Unit<GgmlType::Q4_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 144;
  static constexpr int kValues = 16, kRuns = 2, kRunLen = 8;
  __device__ static int run_start(int64_t u, int r) {
    const int t = static_cast<int>(u & 15);
    return static_cast<int>((u >> 4) * 256) + 64 * (t >> 2) + 8 * (t & 3) + 32 * r;
  }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), c = t >> 2, p = t & 3;
    const float d = fp16_bits(ld_u16(b)), dmin = fp16_bits(ld_u16(b + 2));
    int sc, m;
    scale_min_k4(2 * c, b + 4, sc, m);
    const float d1 = mul(d, static_cast<float>(sc)), m1 = mul(dmin, static_cast<float>(m));
    scale_min_k4(2 * c + 1, b + 4, sc, m);
    const float d2 = mul(d, static_cast<float>(sc)), m2 = mul(dmin, static_cast<float>(m));
    const uint2 raw = *reinterpret_cast<const uint2*>(b + 16 + 32 * c + 8 * p);
    const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = (w[i >> 2] >> (8 * (i & 3))) & 0xFF;
      v[i] = sub(mul(d1, static_cast<float>(q & 0xF)), m1);
      v[8 + i] = sub(mul(d2, static_cast<float>(q >> 4)), m2);
    }
  }
};

// block_q5_K: fp16 d, fp16 dmin, scales[12], qh[32], qs[128] (176 bytes).
template <>
struct Unit<GgmlType::Q5_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 176;
  static constexpr int kValues = 16, kRuns = 2, kRunLen = 8;
  __device__ static int run_start(int64_t u, int r) { return Unit<GgmlType::Q4_K>::run_start(u, r); }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), c = t >> 2, p = t & 3;
    const float d = fp16_bits(ld_u16(b)), dmin = fp16_bits(ld_u16(b + 2));
    int sc, m;
    scale_min_k4(2 * c, b + 4, sc, m);
    const float d1 = mul(d, static_cast<float>(sc)), m1 = mul(dmin, static_cast<float>(m));
    scale_min_k4(2 * c + 1, b + 4, sc, m);
    const float d2 = mul(d, static_cast<float>(sc)), m2 = mul(dmin, static_cast<float>(m));
    const uint2 rh = *reinterpret_cast<const uint2*>(b + 16 + 8 * p);
    const uint2 rl = *reinterpret_cast<const uint2*>(b + 48 + 32 * c + 8 * p);
    const uint32_t wh[2] = {rh.x, rh.y}, wl[2] = {rl.x, rl.y};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = (wl[i >> 2] >> (8 * (i & 3))) & 0xFF;
      const uint32_t h = (wh[i >> 2] >> (8 * (i & 3))) & 0xFF;
      const int lo = static_cast<int>(q & 0xF) + (((h >> (2 * c)) & 1) ? 16 : 0);
      const int hi = static_cast<int>(q >> 4) + (((h >> (2 * c + 1)) & 1) ? 16 : 0);
      v[i] = sub(mul(d1, static_cast<float>(lo)), m1);
      v[8 + i] = sub(mul(d2, static_cast<float>(hi)), m2);
    }
  }
};

// block_q6_K: ql[128], qh[64], int8 scales[16], fp16 d (210 bytes, only 2-byte aligned).
template <>
struct Unit<GgmlType::Q6_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 210;
  static constexpr int kValues = 16, kRuns = 4, kRunLen = 4;
  __device__ static int run_start(int64_t u, int r) {
    const int t = static_cast<int>(u & 15);
    return static_cast<int>((u >> 4) * 256) + 128 * (t >> 3) + 4 * (t & 7) + 32 * r;
  }
  __device__ static void decode(const uint8_t* row, int64_t u, float (&v)[kValues]) {
    const uint8_t* b = row + (u >> 4) * kBlockBytes;
    const int t = static_cast<int>(u & 15), n = t >> 3, l0 = 4 * (t & 7);
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n + l0 / 16;
    const float d = fp16_bits(ld_u16(b + 208));
    float ds[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) ds[r] = mul(d, static_cast<float>(sc[2 * r]));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int l = l0 + k;
      const int a = ql[l], c = ql[l + 32], h = qh[l];
      const int q1 = ((a & 0xF) | (((h >> 0) & 3) << 4)) - 32;
      const int q2 = ((c & 0xF) | (((h >> 2) & 3) << 4)) - 32;
      const int q3 = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const int q4 = ((c >> 4) | (((h >> 6) & 3) << 4)) - 32;
      v[0 + k] = mul(ds[0], static_cast<float>(q1));
      v[4 + k] = mul(ds[1], static_cast<float>(q2));
      v[8 + k] = mul(ds[2], static_cast<float>(q3));
      v[12 + k] = mul(ds[3], static_cast<float>(q4));
    }
  }
};

template <GgmlType T>
__host__ __device__ constexpr int64_t row_bytes_of(int64_t cols) {
  return cols / Unit<T>::kBlockValues * Unit<T>::kBlockBytes;
}

// The specialised dots are bound by instructions, not bytes, so they (1) factor the block scales
// out of the sums — Σ(d·q − m)·x = d·Σq·x − m·Σx — and (2) turn each quant byte into a float with
// one byte-permute and one add instead of a quarter-rate int→float conversion: the byte is placed
// under the exponent of 2^23 (0x4B0000qq == 2^23 + qq exactly), then 2^23 (+ the type's offset)
// is subtracted. Results differ from decode-then-dot only by float rounding.
__device__ __forceinline__ float byte_to_float(uint32_t w, int k, float bias) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<uint32_t>(k))) - bias;
}

// Σ_k byte_k(w)·x_k over the 4 bytes of w (values biased by `bias`), and Σ x_k into sx.
__device__ __forceinline__ float dot4(uint32_t w, float4 x, float bias) {
  return byte_to_float(w, 0, bias) * x.x + byte_to_float(w, 1, bias) * x.y + byte_to_float(w, 2, bias) * x.z +
         byte_to_float(w, 3, bias) * x.w;
}
__device__ __forceinline__ float sum4(float4 x) { return (x.x + x.y) + (x.z + x.w); }

__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {  // 2-byte aligned 32-bit load
  return uint32_t{ld_u16(p)} | (uint32_t{ld_u16(p + 2)} << 16);
}

constexpr float kMagic = 8388608.0f;  // 2^23

}  // namespace ferry::cuda::detail

#include "kernels/cuda/quant_device_more.cuh"  // IWYU pragma: export

namespace ferry::cuda::detail {

// Dot of unit u of a weight row with activation vector x (float, 16-byte aligned): the unit's own
// dot() where it has one (quant_device_more.cuh), else decode, then dot. Q8_0 and the K-quants
// above specialise it below.
template <GgmlType T>
__device__ __forceinline__ float unit_dot(const uint8_t* row, int64_t u, const float* x) {
  using U = Unit<T>;
  if constexpr (HasUnitDot<U>::value) {
    return U::dot(row, u, x);
  } else {
    float w[U::kValues];
    U::decode(row, u, w);
    float acc = 0.f;
#pragma unroll
    for (int r = 0; r < U::kRuns; ++r) {
      const float4* xr = reinterpret_cast<const float4*>(x + U::run_start(u, r));
#pragma unroll
      for (int q = 0; q < U::kRunLen / 4; ++q) {
        const float4 xv = xr[q];
        const float* wv = w + r * U::kRunLen + 4 * q;
        acc += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
      }
    }
    return acc;
  }
}

template <>
__device__ __forceinline__ float unit_dot<GgmlType::Q8_0>(const uint8_t* row, int64_t u, const float* x) {
  const uint8_t* b = row + (u >> 1) * Unit<GgmlType::Q8_0>::kBlockBytes;
  const float d = fp16_bits(ld_u16(b));
  const uint8_t* q = b + 2 + 16 * (u & 1);
  const float4* xr = reinterpret_cast<const float4*>(x + u * 16);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) s += dot4(ld_u32_a2(q + 4 * i) ^ 0x80808080u, xr[i], kMagic + 128.f);  // int8 = byte − 128 after the flip
  return d * s;
}

template <>
__device__ __forceinline__ float unit_dot<GgmlType::Q4_K>(const uint8_t* row, int64_t u, const float* x) {
  using U = Unit<GgmlType::Q4_K>;
  const uint8_t* b = row + (u >> 4) * U::kBlockBytes;
  const int t = static_cast<int>(u & 15), c = t >> 2, p = t & 3;
  const float d = fp16_bits(ld_u16(b)), dmin = fp16_bits(ld_u16(b + 2));
  int sc1, m1, sc2, m2;
  scale_min_k4(2 * c, b + 4, sc1, m1);
  scale_min_k4(2 * c + 1, b + 4, sc2, m2);
  const uint2 raw = *reinterpret_cast<const uint2*>(b + 16 + 32 * c + 8 * p);
  const float4* xa = reinterpret_cast<const float4*>(x + U::run_start(u, 0));
  const float4* xb = reinterpret_cast<const float4*>(x + U::run_start(u, 1));
  const uint32_t w[2] = {raw.x, raw.y};
  float s1 = 0.f, s2 = 0.f, sx1 = 0.f, sx2 = 0.f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float4 a = xa[i], bb = xb[i];
    s1 += dot4(w[i] & 0x0F0F0F0Fu, a, kMagic);
    s2 += dot4((w[i] >> 4) & 0x0F0F0F0Fu, bb, kMagic);
    sx1 += sum4(a);
    sx2 += sum4(bb);
  }
  return d * (static_cast<float>(sc1) * s1 + static_cast<float>(sc2) * s2) -
         dmin * (static_cast<float>(m1) * sx1 + static_cast<float>(m2) * sx2);
}

template <>
__device__ __forceinline__ float unit_dot<GgmlType::Q5_K>(const uint8_t* row, int64_t u, const float* x) {
  using U = Unit<GgmlType::Q5_K>;
  const uint8_t* b = row + (u >> 4) * U::kBlockBytes;
  const int t = static_cast<int>(u & 15), c = t >> 2, p = t & 3;
  const float d = fp16_bits(ld_u16(b)), dmin = fp16_bits(ld_u16(b + 2));
  int sc1, m1, sc2, m2;
  scale_min_k4(2 * c, b + 4, sc1, m1);
  scale_min_k4(2 * c + 1, b + 4, sc2, m2);
  const uint2 rh = *reinterpret_cast<const uint2*>(b + 16 + 8 * p);
  const uint2 rl = *reinterpret_cast<const uint2*>(b + 48 + 32 * c + 8 * p);
  const float4* xa = reinterpret_cast<const float4*>(x + U::run_start(u, 0));
  const float4* xb = reinterpret_cast<const float4*>(x + U::run_start(u, 1));
  const uint32_t wl[2] = {rl.x, rl.y}, wh[2] = {rh.x, rh.y};
  float s1 = 0.f, s2 = 0.f, sx1 = 0.f, sx2 = 0.f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float4 a = xa[i], bb = xb[i];
    const uint32_t lo = (wl[i] & 0x0F0F0F0Fu) | (((wh[i] >> (2 * c)) & 0x01010101u) << 4);
    const uint32_t hi = ((wl[i] >> 4) & 0x0F0F0F0Fu) | (((wh[i] >> (2 * c + 1)) & 0x01010101u) << 4);
    s1 += dot4(lo, a, kMagic);
    s2 += dot4(hi, bb, kMagic);
    sx1 += sum4(a);
    sx2 += sum4(bb);
  }
  return d * (static_cast<float>(sc1) * s1 + static_cast<float>(sc2) * s2) -
         dmin * (static_cast<float>(m1) * sx1 + static_cast<float>(m2) * sx2);
}

template <>
__device__ __forceinline__ float unit_dot<GgmlType::Q6_K>(const uint8_t* row, int64_t u, const float* x) {
  using U = Unit<GgmlType::Q6_K>;
  const uint8_t* b = row + (u >> 4) * U::kBlockBytes;
  const int t = static_cast<int>(u & 15), n = t >> 3, l0 = 4 * (t & 7);
  const uint8_t* ql = b + 64 * n + l0;
  const uint32_t a = ld_u32_a2(ql), c = ld_u32_a2(ql + 32), h = ld_u32_a2(b + 128 + 32 * n + l0);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n + l0 / 16;
  const float d = fp16_bits(ld_u16(b + 208));
  const uint32_t q[4] = {(a & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4),
                         (c & 0x0F0F0F0Fu) | (((h >> 2) & 0x03030303u) << 4),
                         ((a >> 4) & 0x0F0F0F0Fu) | (((h >> 4) & 0x03030303u) << 4),
                         ((c >> 4) & 0x0F0F0F0Fu) | (((h >> 6) & 0x03030303u) << 4)};
  float acc = 0.f;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float4 xv = *reinterpret_cast<const float4*>(x + U::run_start(u, r));
    acc += static_cast<float>(sc[2 * r]) * dot4(q[r], xv, kMagic + 32.f);  // q − 32
  }
  return d * acc;
}

// Writes the values of unit u into out (a float or half row of `cols` values).
template <GgmlType T, typename Out>
__device__ __forceinline__ void unit_store(const uint8_t* row, int64_t u, Out* out) {
  using U = Unit<T>;
  float w[U::kValues];
  U::decode(row, u, w);
#pragma unroll
  for (int r = 0; r < U::kRuns; ++r) {
    Out* o = out + U::run_start(u, r);
#pragma unroll
    for (int i = 0; i < U::kRunLen; ++i) {
      if constexpr (sizeof(Out) == 4) o[i] = w[r * U::kRunLen + i];
      else o[i] = __float2half_rn(w[r * U::kRunLen + i]);
    }
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The default branch of the type dispatches: `op` and the type id, then what is missing.
[[noreturn]] inline void throw_no_kernel(GgmlType t, const std::string& op, const char* missing) {
  throw_unsupported(op + ": weight type id " + std::to_string(static_cast<unsigned>(t)) + " " + missing);
}
}  // namespace ferry::cuda::detail

// One case of a type dispatch: CODE with `constexpr GgmlType kT` set to GgmlType::T.
#define FERRY_TYPE_CASE(T, ...)                   \
  case ::ferry::GgmlType::T: {                    \
    constexpr auto kT = ::ferry::GgmlType::T;     \
    __VA_ARGS__;                                  \
    break;                                        \
  }

// FERRY_WEIGHT_TYPE_CASES(CODE): one FERRY_TYPE_CASE per weight type the CUDA kernels ship.
// clang-format off
#define FERRY_WEIGHT_TYPE_CASES(...)                                                             \
  FERRY_TYPE_CASE(F32, __VA_ARGS__) FERRY_TYPE_CASE(F16, __VA_ARGS__)                            \
  FERRY_TYPE_CASE(BF16, __VA_ARGS__) FERRY_TYPE_CASE(Q8_0, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q4_K, __VA_ARGS__) FERRY_TYPE_CASE(Q5_K, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q6_K, __VA_ARGS__) FERRY_TYPE_CASE(Q4_0, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q4_1, __VA_ARGS__) FERRY_TYPE_CASE(Q5_0, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q5_1, __VA_ARGS__) FERRY_TYPE_CASE(Q2_K, __VA_ARGS__)                          \
  FERRY_TYPE_CASE(Q3_K, __VA_ARGS__) FERRY_TYPE_CASE(IQ4_NL, __VA_ARGS__)                        \
  FERRY_TYPE_CASE(IQ4_XS, __VA_ARGS__) FERRY_TYPE_CASE(MXFP4, __VA_ARGS__)

// FERRY_DISPATCH_WEIGHT_TYPE(t, op, CODE): runs CODE with `constexpr GgmlType kT` set to t for the
// weight types the CUDA kernels ship; any other type throws unsupported naming op.
#define FERRY_DISPATCH_WEIGHT_TYPE(t, op, ...)                                                   \
  switch (t) {                                                                                   \
    FERRY_WEIGHT_TYPE_CASES(__VA_ARGS__)                                                         \
    default:                                                                                     \
      ::ferry::cuda::detail::throw_no_kernel(t, op, "has no CUDA kernel (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, " \
                                             "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)"); \
  }
// clang-format on
