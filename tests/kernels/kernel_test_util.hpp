#pragma once
// Shared helpers of the CPU kernel tests: random data, the ISA paths this machine can run, and a
// restorer for the active ISA.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/core/types.hpp"

namespace ferry::test {

// Every type Ferry computes with as a weight (vec_dot_type defined, a DotKernels entry).
inline constexpr GgmlType kWeightTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K,
    GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
    GgmlType::IQ4_XS};

// The weight types whose kernel tests use random valid blocks rather than a quantizer's output:
// every field random reaches bit patterns a quantizer never writes (Q2_K and Q3_K have no quantizer
// in Ferry; the others' reference quantizers are tested against ggml on their own).
inline bool random_block_type(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::IQ4_NL: case GgmlType::MXFP4: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::IQ4_XS:
      return true;
    default: return false;
  }
}

inline std::vector<cpu::Isa> available_isas() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa i : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512vnni})
    if (i <= cpu::detected_isa()) out.push_back(i);
  return out;
}

// Restores the ISA that was active when it was created.
class IsaGuard {
 public:
  IsaGuard() : saved_(cpu::active_isa()) {}
  ~IsaGuard() { cpu::set_isa(saved_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  cpu::Isa saved_;
};

// Gaussian values with a per-32 group scale that varies over two orders of magnitude and a few
// outliers, so that block scales, mins and clamps are all exercised.
inline std::vector<float> random_weights(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(-2.f, 0.f);
  std::vector<float> v(static_cast<size_t>(n));
  float group_scale = 1.f, group_shift = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) {
      group_scale = std::pow(10.f, ud(rng));
      group_shift = (i / 32) % 3 == 0 ? 0.5f * group_scale : 0.f;  // some groups not centred
    }
    float x = nd(rng) * group_scale + group_shift;
    if (i % 97 == 5) x *= 6.f;  // outlier
    v[static_cast<size_t>(i)] = x;
  }
  return v;
}

inline std::vector<float> random_normal(std::mt19937& rng, int64_t n, float sigma = 1.f) {
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

inline std::vector<uint8_t> quantize(GgmlType t, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(row_bytes(t, static_cast<uint64_t>(n)));
  cpu::quantize_row_ref(t, x.data(), q.data(), n);
  return q;
}

inline std::vector<float> dequantize(GgmlType t, const uint8_t* q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  cpu::dequantize_row_ref(t, q, y.data(), n);
  return y;
}

inline int64_t block_values(GgmlType t) { return type_info(t).block_values; }

// A random finite fp16 in [2^-14, 2^1) · ±1 (random mantissa): the d/dmin fields of random blocks.
inline uint16_t random_fp16_scale(std::mt19937& rng, bool allow_negative) {
  std::uniform_int_distribution<int> exp(1, 16), man(0, 1023), sign(0, 1);
  const int s = allow_negative ? sign(rng) : 0;
  return static_cast<uint16_t>((s << 15) | (exp(rng) << 10) | man(rng));
}

// Random bytes, with every fp16/f32 scale field replaced by a finite random value: every level,
// scale and min bit pattern is reachable, unlike the output of a quantizer. MXFP4's E8M0 scale
// takes any byte when `full_range`, else 2^-10..2^8 (so that dot products stay finite).
inline std::vector<uint8_t> random_blocks(std::mt19937& rng, GgmlType t, int64_t n, bool full_range = false) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<uint64_t>(n)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& c : q) c = static_cast<uint8_t>(byte(rng));
  const TypeInfo& ti = type_info(t);
  for (size_t off = 0; off < q.size(); off += ti.block_bytes) {
    uint8_t* b = q.data() + off;
    auto put16 = [&](size_t at, uint16_t h) { std::memcpy(b + at, &h, 2); };
    switch (t) {
      case GgmlType::F32: { const float f = std::normal_distribution<float>(0, 1)(rng); std::memcpy(b, &f, 4); break; }
      case GgmlType::F16:
      case GgmlType::BF16: {
        const float f = std::normal_distribution<float>(0, 1)(rng);
        put16(0, t == GgmlType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f));
        break;
      }
      case GgmlType::Q8_0:
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS: put16(0, random_fp16_scale(rng, true)); break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        put16(0, random_fp16_scale(rng, true));
        put16(2, random_fp16_scale(rng, true));
        break;
      case GgmlType::MXFP4: b[0] = static_cast<uint8_t>(full_range ? byte(rng) : 117 + byte(rng) % 19); break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put16(0, random_fp16_scale(rng, false));
        put16(2, random_fp16_scale(rng, false));
        break;
      case GgmlType::Q2_K:
        put16(80, random_fp16_scale(rng, false));
        put16(82, random_fp16_scale(rng, false));
        break;
      case GgmlType::Q3_K: put16(108, random_fp16_scale(rng, true)); break;
      case GgmlType::Q6_K: put16(208, random_fp16_scale(rng, true)); break;
      case GgmlType::Q8_K: { const float d = std::ldexp(1.f + byte(rng) / 256.f, -byte(rng) % 12); std::memcpy(b, &d, 4); break; }
      default: break;
    }
  }
  return q;
}

// A weight row of n values for the dot-product and matmul tests: the reference quantizer's output
// for random_weights, or random valid blocks for the types Ferry cannot quantize.
inline std::vector<uint8_t> weight_row(std::mt19937& rng, GgmlType t, int64_t n) {
  if (random_block_type(t)) return random_blocks(rng, t, n);
  return quantize(t, random_weights(rng, n));
}

// Q4_1/Q5_1 dot Q8_1 activations as Σ (d_w·q_w)(d_x·q_x) + Σ_blocks m_w·s_x, where s_x is d_x·Σ q_x
// rounded to fp16: the dot of the dequantized rows differs from that by Σ m_w·(Σ deq(x) − s_x).
// Returns that difference (0 for the other types), to add to a double-precision reference
// Σ deq(w)·deq(x), and in *mag the magnitude Σ |m_w·s_x| of the min terms.
inline double q8_1_min_term_shift(GgmlType t, const uint8_t* w, const uint8_t* xq, int64_t n, double* mag = nullptr) {
  if (mag) *mag = 0;
  if (cpu::vec_dot_type(t) != GgmlType::Q8_1) return 0;
  const size_t wb = type_info(t).block_bytes;
  double shift = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* xb = xq + 36 * b;
    uint16_t mh, dh, sh;
    std::memcpy(&mh, w + wb * b + 2, 2);
    std::memcpy(&dh, xb, 2);
    std::memcpy(&sh, xb + 2, 2);
    const double m = fp16_to_fp32(mh), s = fp16_to_fp32(sh), d = fp16_to_fp32(dh);
    double sum = 0;  // Σ deq(x) of the block
    for (int j = 0; j < 32; ++j) sum += static_cast<double>(static_cast<float>(static_cast<int8_t>(xb[4 + j])) * static_cast<float>(d));
    shift += m * (s - sum);
    if (mag) *mag += std::fabs(m * s);
  }
  return shift;
}

}  // namespace ferry::test
