#pragma once
// The Walsh-Hadamard rotation llama.cpp applies around a quantized KV cache (llama-kv-cache.cpp
// attn_rot_k / attn_rot_v, computed on the CPU by ggml_compute_forward_fwht): an orthonormal,
// self-inverse H (H·H = I) over consecutive chunks of n values, so that Q·Kᵀ is unchanged while
// the values quantized into the cache are spread evenly (fewer outliers per block).
#include <cstdint>

namespace ferry::cpu {

// x[i] ← (H_n · x)[i] for each chunk of n values (n a power of two, count a multiple of n), as
// ggml's fwht rounds it: x·(1/√n) first, then log2(n) butterfly passes (u + v, u − v) with
// lengths 1, 2, 4, ...
void hadamard_rotate(float* x, int64_t count, int32_t n);

// llama.cpp's rotation sizes (0: no rotation). K: for a quantized K type and a head size that is
// a multiple of 64, the largest power of two ≥ 64 dividing the head size (Q is rotated alike).
// V: 64 for a quantized V type and a head size that is a multiple of 64 (the attention output is
// rotated back).
int32_t kv_rotation_k(bool quantized, int32_t head_dim);
int32_t kv_rotation_v(bool quantized, int32_t head_dim);

}  // namespace ferry::cpu
