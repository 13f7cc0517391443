#pragma once
// Helpers for the GPU tests: skip without a device, device buffers, random data, NMSE reports.
// Every comparison prints one line
//   [gpu-op] <op> | <shape> | nmse=<x> | bound=<b> | PASS|FAIL
// which bench/gpu-check.sh collects into its summary table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "runtime/backend/cuda_device.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/types.hpp"
#include "runtime/synth/quantize_extra.hpp"
#include "runtime/synth/random_blocks.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.cuh"
#endif

namespace ferry::gputest {

#define FERRY_REQUIRE_GPU()                                                        \
  do {                                                                             \
    if (::ferry::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";       \
  } while (0)

// True in the CUDA emulator build (tests/cuda_emu): results are checked as on a GPU, speeds are not.
constexpr bool emulated() {
#if defined(FERRY_CUDA_EMU)
  return true;
#else
  return false;
#endif
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Every weight type the CUDA kernels compute with.
inline constexpr GgmlType kCudaWeightTypes[] = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,   GgmlType::Q2_K,
    GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

// (rows, cols) weights of type t: src quantized as llama-quantize does (kernels/cpu's reference
// quantizers; synth's for MXFP4, IQ4_NL, IQ4_XS), or for Q2_K/Q3_K, which Ferry has no quantizer
// for, random valid blocks (synth, stream `seed`) with values of RMS 0.5; src is then unused.
inline std::vector<uint8_t> quantize_rows(GgmlType t, const std::vector<float>& src, int64_t rows, int64_t cols,
                                          uint32_t seed) {
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  std::vector<uint8_t> q(static_cast<size_t>(rows) * rb);
  if (synth::is_random_block_type(t)) {
    synth::random_block_rows(t, seed, 0, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), 0.5f, q.data());
  } else if (synth::quantize_extra_supports(t)) {
    synth::quantize_extra_rows(t, src.data(), q.data(), rows, cols);
  } else {
    for (int64_t r = 0; r < rows; ++r) cpu::quantize_row_ref(t, src.data() + r * cols, q.data() + r * rb, cols);
  }
  return q;
}

// (rows, cols) floats ← rows of type t by the CPU reference (bit-exact with ggml).
inline std::vector<float> dequantize_rows(GgmlType t, const uint8_t* q, int64_t rows, int64_t cols) {
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) cpu::dequantize_row_ref(t, q + r * rb, out.data() + r * cols, cols);
  return out;
}

// Σ(ref − got)² / Σ ref² in double (the test-backend-ops measure).
template <typename A, typename B>
double nmse(const A& ref, const B& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(ref[i]) - static_cast<double>(got[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (ref.size() != got.size()) return INFINITY;
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::isfinite(num) ? num / den : INFINITY;
}

inline void report(const std::string& op, const std::string& shape, double err, double bound) {
  const bool ok = err <= bound;  // NaN fails
  std::printf("[gpu-op] %s | %s | nmse=%.3g | bound=%.1g | %s\n", op.c_str(), shape.c_str(), err, bound,
              ok ? "PASS" : "FAIL");
  std::fflush(stdout);
  EXPECT_TRUE(ok) << op << " " << shape << ": nmse " << err << " > " << bound;
}

inline void report_exact(const std::string& op, const std::string& shape, bool equal) {
  std::printf("[gpu-op] %s | %s | exact | - | %s\n", op.c_str(), shape.c_str(), equal ? "PASS" : "FAIL");
  std::fflush(stdout);
  EXPECT_TRUE(equal) << op << " " << shape << ": not bit-exact";
}

#if FERRY_HAVE_CUDA
// Device memory for tests (cudaMalloc/cudaFree, not budgeted).
template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) { FERRY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DevBuf(const std::vector<T>& host) : DevBuf(host.size()) { upload(host); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    FERRY_CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    FERRY_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    FERRY_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline void sync() { FERRY_CUDA_CHECK(cudaDeviceSynchronize()); }
#endif

}  // namespace ferry::gputest
