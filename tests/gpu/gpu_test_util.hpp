#pragma once
// Helpers for the GPU tests: skip without a device, device buffers, random data, NMSE reports.
// Every comparison prints one line
//   [gpu-op] <op> | <shape> | nmse=<x> | bound=<b> | PASS|FAIL
// which bench/gpu-check.sh collects into its summary table.
#include <gtest/gtest.h>

#include <algorithm>
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

// The first blocks (of block_bytes) where two byte images differ, as hex, for a failure line: what
// a GPU run must bring back when it cannot be rerun at once. Empty when they are equal.
inline std::string byte_mismatch(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, size_t block_bytes,
                                 int max_blocks = 3) {
  std::string out;
  if (want.size() != got.size()) return "sizes " + std::to_string(want.size()) + " vs " + std::to_string(got.size());
  int shown = 0;
  size_t differing = 0;
  for (size_t b0 = 0; b0 < want.size(); b0 += block_bytes) {
    const size_t n = std::min(block_bytes, want.size() - b0);
    if (std::equal(want.begin() + b0, want.begin() + b0 + n, got.begin() + b0)) continue;
    ++differing;
    if (shown++ >= max_blocks) continue;
    char buf[8];
    out += "\n  block " + std::to_string(b0 / block_bytes) + " want";
    for (size_t i = 0; i < n; ++i) out += (std::snprintf(buf, sizeof buf, " %02x", want[b0 + i]), buf);
    out += "\n  block " + std::to_string(b0 / block_bytes) + " got ";
    for (size_t i = 0; i < n; ++i) out += (std::snprintf(buf, sizeof buf, " %02x", got[b0 + i]), buf);
  }
  return differing ? std::to_string(differing) + " of " + std::to_string((want.size() + block_bytes - 1) / block_bytes) +
                         " blocks differ:" + out
                   : out;
}

// report_exact of two byte images; on a mismatch the first differing blocks are printed.
inline void report_bytes(const std::string& op, const std::string& shape, const std::vector<uint8_t>& want,
                         const std::vector<uint8_t>& got, size_t block_bytes) {
  report_exact(op, shape, want == got);
  if (want != got) {
    std::printf("[gpu-detail] %s | %s | %s\n", op.c_str(), shape.c_str(), byte_mismatch(want, got, block_bytes).c_str());
    std::fflush(stdout);
  }
}

// The first elements where got differs from ref by more than a relative tol, as (row, column) of
// rows of row_len values, for a failure line.
inline std::string float_mismatch(const std::vector<float>& ref, const std::vector<float>& got, size_t row_len,
                                  double tol = 1e-3, int max_shown = 6) {
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < ref.size() && i < got.size() && shown < max_shown; ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(d <= tol * (1.0 + std::fabs(static_cast<double>(ref[i]))))) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " [%zu,%zu] ref %.7g got %.7g;", i / row_len, i % row_len, ref[i], got[i]);
      out += buf;
      ++shown;
    }
  }
  return out;
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
