#include "runtime/cli/bench_membw.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include "runtime/core/error.hpp"

namespace ferry::cli {
namespace {

// Sum of a slice with four independent accumulators, so the loop is bound by loads, not by the
// add chain (the compiler vectorizes it at -O2/-O3).
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

}  // namespace

size_t probe_bytes() {
  size_t llc = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string s;
    if (!(in >> s) || s.empty()) continue;
    size_t v = 0;
    try {
      v = std::stoull(s);
    } catch (const std::exception&) {
      continue;
    }
    const char unit = s.back();
    if (unit == 'K') v <<= 10;
    else if (unit == 'M') v <<= 20;
    else if (unit == 'G') v <<= 30;
    llc = std::max(llc, v);
  }
  return std::clamp<size_t>(4 * llc, size_t{256} << 20, size_t{2} << 30);
}

double measure_host_read_gbps(size_t bytes, int passes) {
  if (bytes == 0) bytes = probe_bytes();
  const size_t n = std::max<size_t>(bytes / sizeof(uint64_t), 1 << 16);
  std::vector<uint64_t> buf(n);
  // Random contents touch every page (no zero-page sharing) and defeat any compression.
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<size_t>& r) {
    std::mt19937_64 g(r.begin() * 0x9E3779B97F4A7C15ull + 1);
    for (size_t i = r.begin(); i < r.end(); ++i) buf[i] = g();
  });
  constexpr size_t kSliceWords = size_t{1} << 15;  // 256 KiB per task: few tasks, little overhead
  double best_s = 0;
  volatile uint64_t sink = 0;
  for (int p = 0; p < std::max(passes, 1); ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t s = tbb::parallel_reduce(
        tbb::blocked_range<size_t>(0, n, kSliceWords), uint64_t{0},
        [&](const tbb::blocked_range<size_t>& r, uint64_t acc) { return acc + sum_words(buf.data() + r.begin(), r.size()); },
        [](uint64_t x, uint64_t y) { return x + y; });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + s;
    if (p == 0 || sec < best_s) best_s = sec;
  }
  (void)sink;
  return static_cast<double>(n * sizeof(uint64_t)) / best_s / 1e9;
}

std::optional<double> measure_device_copy_gbps(Device& d, size_t bytes, int passes) {
  DeviceBuffer a, b;
  try {
    a = d.alloc(bytes, "bench bandwidth probe");
    b = d.alloc(bytes, "bench bandwidth probe");
  } catch (const Error&) {
    return std::nullopt;
  }
  auto stream = d.create_stream();
  auto start = d.create_event(), stop = d.create_event();
  stream->memset(a.data(), 1, bytes);
  stream->copy_d2d(b.data(), a.data(), bytes);  // first touch outside the timing
  stream->synchronize();
  double best_ms = 0;
  for (int p = 0; p < std::max(passes, 1); ++p) {
    stream->record(*start);
    stream->copy_d2d(b.data(), a.data(), bytes);
    stream->record(*stop);
    stop->synchronize();
    const double ms = stop->elapsed_ms_since(*start);
    if (p == 0 || ms < best_ms) best_ms = ms;
  }
  if (best_ms <= 0) return std::nullopt;
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}

}  // namespace ferry::cli
