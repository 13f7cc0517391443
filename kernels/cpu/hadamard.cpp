#include "kernels/cpu/hadamard.hpp"

#include <cmath>

namespace ferry::cpu {

void hadamard_rotate(float* x, int64_t count, int32_t n) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t c = 0; c + n <= count; c += n) {
    float* r = x + c;
    for (int32_t j = 0; j < n; ++j) r[j] *= scale;
    for (int32_t len = 1; len < n; len <<= 1)
      for (int32_t i = 0; i < n; i += 2 * len)
        for (int32_t j = 0; j < len; ++j) {
          const float u = r[i + j], v = r[i + len + j];
          r[i + j] = u + v;
          r[i + len + j] = u - v;
        }
  }
}

int32_t kv_rotation_k(bool quantized, int32_t head_dim) {
  if (!quantized || head_dim <= 0 || head_dim % 64 != 0) return 0;
  int32_t n = 64;
  while (head_dim % (2 * n) == 0) n *= 2;
  return n;
}

int32_t kv_rotation_v(bool quantized, int32_t head_dim) {
  return quantized && head_dim > 0 && head_dim % 64 == 0 ? 64 : 0;
}

}  // namespace ferry::cpu
