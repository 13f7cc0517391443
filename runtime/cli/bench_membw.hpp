#pragma once
// Memory bandwidth for `ferry bench`'s speed-of-light column: how fast this machine can stream
// bytes that are not in cache, measured once per thread count (host) or per device (cuda).
#include <cstddef>
#include <optional>

#include "runtime/backend/device.hpp"

namespace ferry::cli {

// Host DRAM read bandwidth in GB/s (1e9 bytes/s) with the calling thread's oneTBB parallelism
// (hold a ThreadLimit around the call): a buffer of `bytes` filled with random words, then summed
// in parallel slices; the best of `passes` timed passes, as a decode step streams its weights
// once and the best pass is the least disturbed. bytes 0: probe_bytes().
double measure_host_read_gbps(size_t bytes = 0, int passes = 5);
// 4 × the last-level cache (sysfs), within [256 MiB, 2 GiB]: a probe that fits in the cache would
// measure the cache (some VMs report a 260 MiB L3).
size_t probe_bytes();

// Device memory bandwidth in GB/s: device-to-device copies of `bytes`, counted as read + write
// (2 × bytes per copy, as CUDA's bandwidthTest does), best of `passes`, timed with device events.
// nullopt when the two buffers do not fit the device's budget.
std::optional<double> measure_device_copy_gbps(Device& d, size_t bytes = size_t{256} << 20, int passes = 5);

}  // namespace ferry::cli
