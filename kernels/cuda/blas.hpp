#pragma once
// cuBLAS, loaded at run time. libcublasLt alone is ~500 MB, so Ferry does not link it: when the
// library is present (any CUDA toolkit or the nvidia-cublas wheel), large-batch matmuls use it;
// when it is absent, Blas::try_load says why and callers use the tiled kernel instead.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ferry::cuda {

class Blas {
 public:
  // nullptr when libcublas cannot be loaded or a handle cannot be created; *why_not says why.
  static std::unique_ptr<Blas> try_load(std::string* why_not = nullptr);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // cuBLAS allocates a private workspace per handle unless given one; Ferry hands it memory from
  // its own budgeted pool so that all device memory is accounted for. ws must stay valid while
  // this Blas is used (nullptr/0: cuBLAS picks algorithms that need none).
  void set_workspace(void* ws, size_t bytes);

  // Y (n, rows) row-major, row stride ldy, float = W (rows, cols) · X (n, cols)ᵀ, with W and X
  // both f16 (f16_inputs) or both f32, accumulation in f32. All pointers are device pointers.
  // Ordered on `stream`. Not thread-safe: one Blas per host thread.
  void gemm_w_xt(bool f16_inputs, const void* W, const void* X, float* Y, int64_t rows,
                 int64_t n, int64_t cols, int64_t ldy, cudaStream_t stream);

  const std::string& library() const { return library_; }

 private:
  struct Impl;
  explicit Blas(std::unique_ptr<Impl> impl, std::string library);
  std::unique_ptr<Impl> impl_;
  std::string library_;
};

}  // namespace ferry::cuda
