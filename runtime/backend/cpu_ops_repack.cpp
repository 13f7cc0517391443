// CpuOps::resident_matmul: Q4_0, IQ4_NL and MXFP4 matrices in the sixteen-row interleaved layout
// (kernels/cpu/rows16.hpp), made once at load. The sixteen-row kernel then loads each block step
// as it is instead of sixteen rows, a transpose and a gather: bench_matvec Q4_0 at cols 2048 reads
// 2.1x as fast in cache and 1.1-1.3x from DRAM (bench/results/2026-12-04-cpu-rows16-zen4.md).
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/rows16.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace ferry {
namespace {

// Host memory for a repacked matrix: 2 MiB-aligned and marked for transparent huge pages, so the
// copy takes few page faults and the kernels' reads few TLB misses (a hint; 4 KiB pages otherwise).
DeviceBuffer alloc_huge(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) fail(ErrorKind::budget, "cpu: cannot allocate {} bytes of host memory", bytes);
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
}

}  // namespace

WeightView CpuOps::resident_matmul(const WeightView& host) {
  if (!options_.repack || !host.data || host.layout != WeightLayout::file ||
      !cpu::rows16_fast(host.type, host.rows))
    return host;
  for (const auto& [data, view] : repacked_views_)
    if (data == host.data && view.type == host.type && view.rows == host.rows &&
        view.cols == host.cols)
      return view;
  const size_t bytes =
      static_cast<size_t>(host.rows) * row_bytes(host.type, static_cast<uint64_t>(host.cols));
  if (repacked_bytes_ + bytes > options_.repack_budget) {
    if (repack_skipped_bytes_ == 0)
      log::warn("cpu: not enough free host memory to repack every {} matrix; the rest keep the "
                "file's layout (slower kernels)", type_name(host.type));
    repack_skipped_bytes_ += bytes;
    return host;
  }
  DeviceBuffer buf = alloc_huge(bytes);
  cpu::repack_rows16(host.type, host.data, host.rows, host.cols, buf.data());
  WeightView v = host;
  v.data = buf.data();
  v.layout = WeightLayout::rows16;
  repacked_bytes_ += bytes;
  if (options_.repacked) options_.repacked(host.data, bytes);
  log::debug("cpu: {} matrix {}x{} repacked into the interleaved layout ({} bytes)",
             type_name(host.type), host.rows, host.cols, bytes);
  repacked_views_.emplace_back(host.data, v);
  repacked_.push_back(std::move(buf));
  return v;
}

}  // namespace ferry
