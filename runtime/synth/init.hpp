#pragma once
// Deterministic random numbers for synthetic weights. Every row of every tensor has its own stream,
// seeded from hash(seed, tensor name, row), so values do not depend on how rows are grouped into
// work chunks or on the thread count. Only integer arithmetic and exactly rounded float operations
// are used for the bulk values, so the bytes are the same on every machine and compiler.
#include <cstdint>
#include <string_view>

namespace ferry::synth {

// SplitMix64 (Steele, Lea, Flood 2014): a counter-based generator; each call advances the state by
// the golden-ratio increment and returns a strongly mixed 64-bit value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t hash_combine(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xD6E8FEB86659FD93ull + 0x2545F4914F6CDD1Dull);
  return splitmix64(s);
}

// FNV-1a over the bytes of s.
inline uint64_t hash_string(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Approximately standard normal: Irwin–Hall sum of four 16-bit uniforms, centred and scaled to unit
// variance. Bounded by ±2√3 (no far tails) but cheap and bit-reproducible everywhere, which a
// Box–Muller transform through libm's log/cos is not.
inline float normal_from_bits(uint64_t r) {
  const uint32_t sum = static_cast<uint32_t>(r & 0xFFFF) + static_cast<uint32_t>((r >> 16) & 0xFFFF) +
                       static_cast<uint32_t>((r >> 32) & 0xFFFF) + static_cast<uint32_t>(r >> 48);
  // sum ∈ [0, 4·65535]; mean 2·65535, variance 4·(65536²−1)/12.
  constexpr float kCentre = 2.0f * 65535.0f;
  constexpr float kInvStd = 1.0f / 37837.23f;  // 1 / sqrt(4·(65536²−1)/12)
  return (static_cast<float>(sum) - kCentre) * kInvStd;
}

// Uniform in [0, 1) with 24 random bits.
inline float uniform_from_bits(uint64_t r) { return static_cast<float>(r >> 40) * (1.0f / 16777216.0f); }

class RowRng {
 public:
  RowRng(uint64_t tensor_seed, uint64_t row) : state_(hash_combine(tensor_seed, row)) {}
  float normal() { return normal_from_bits(splitmix64(state_)); }
  float uniform() { return uniform_from_bits(splitmix64(state_)); }
  uint64_t bits() { return splitmix64(state_); }

 private:
  uint64_t state_;
};

inline uint64_t tensor_seed(uint64_t seed, std::string_view tensor_name) {
  return hash_combine(hash_combine(seed, 0x5EEDF3E77ull), hash_string(tensor_name));
}

}  // namespace ferry::synth
