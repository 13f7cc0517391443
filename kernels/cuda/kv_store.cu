// Quantize-on-write of KV cache rows (BF16 and the 32-value block types of llama.cpp's -ctk/-ctv
// set), with the Hadamard rotation of quantized caches. The bytes equal kernels/cpu's
// quantize_row_cpu of the rotated row (CpuOps::kv_store); the row store itself is
// kv_store_device.cuh's, which the fused attention prep shares.
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kv_store_device.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/quant_device.cuh"

namespace ferry::cuda {
namespace {

constexpr int kStoreThreads = 128;

// grid n_tokens, kStoreThreads threads, row_elems floats of dynamic shared memory: token t's row is
// staged, rotated in chunks of n_rot (0: none) and written as row_elems values of type t.
__global__ void __launch_bounds__(kStoreThreads)
    kv_store_quant_kernel(const float* src, int64_t ld_src, uint8_t* cache, GgmlType type, int64_t p0,
                          int64_t row_elems, int64_t row_bytes, int n_rot, float rot_scale) {
  FERRY_PDL_WAIT();
  FERRY_DYNAMIC_SHARED(float, x);
  const int64_t t = blockIdx.x;
  detail::kv_store_row(src + t * ld_src, x, row_elems, cache + (p0 + t) * row_bytes, type, row_bytes, n_rot, rot_scale);
}

}  // namespace

int64_t detail::check_kv_store_row(const char* op, GgmlType type, int64_t row_elems, int n_rot) {
  const int64_t row_bytes = kv_head_bytes(type, row_elems);
  require(type != GgmlType::F32 && type != GgmlType::F16 && row_bytes > 0, op,
          "cache type id " + std::to_string(static_cast<unsigned>(type)) +
              " (quantized path: BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)");
  require(type == GgmlType::BF16 || row_elems % 32 == 0, op, "row of a block type must be whole blocks of 32");
  require(n_rot == 0 || (n_rot >= 64 && (n_rot & (n_rot - 1)) == 0 && row_elems % n_rot == 0), op,
          "rotation size must be 0 or a power of two ≥ 64 dividing the row");
  require(row_elems <= kMaxStoreRowValues, op,
          "a token row of " + std::to_string(row_elems) + " values exceeds the " + std::to_string(kMaxStoreRowValues) +
              " staged in shared memory");
  return row_bytes;
}

void kv_store_quantized(const float* src, int64_t ld_src, void* cache, GgmlType cache_type, int64_t p0,
                        int64_t n_tokens, int64_t row_elems, int n_rot, float rot_scale, cudaStream_t stream) {
  const char* op = "kv_store";
  require(src && cache && p0 >= 0 && ld_src >= row_elems && row_elems > 0, op, "bad arguments");
  const int64_t row_bytes = detail::check_kv_store_row(op, cache_type, row_elems, n_rot);
  require(n_tokens <= 2147483647, op, "too many tokens");
  if (n_tokens <= 0) return;
  launch(kv_store_quant_kernel, static_cast<unsigned>(n_tokens), kStoreThreads, static_cast<size_t>(row_elems) * 4, stream,
         src, ld_src, static_cast<uint8_t*>(cache), cache_type, p0, row_elems, row_bytes, n_rot, rot_scale);
  FERRY_CUDA_CHECK_LAUNCH("kv_store_quant_kernel");
}

}  // namespace ferry::cuda
