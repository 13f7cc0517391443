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

#include "runtime/backend/cuda_device.hpp"
#include "runtime/core/error.hpp"

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
