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

inline constexpr GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                            GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                                            GgmlType::Q6_K};

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

}  // namespace ferry::test
