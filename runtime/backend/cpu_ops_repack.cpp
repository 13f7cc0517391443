// CpuOps::resident_matmul: Q4_0, IQ4_NL and MXFP4 matrices in the sixteen-row interleaved layout
// (kernels/cpu/rows16.hpp), made once at load. The sixteen-row kernel then loads each block step
// as it is instead of sixteen rows, a transpose and a gather: bench_matvec Q4_0 at cols 2048 reads
// 2.1x as fast in cache and 1.1-1.3x from DRAM (bench/results/2026-12-04-cpu-rows16-zen4.md).
#include <sys/mman.h>

#include "kernels/cpu/rows16.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/log.hpp"

namespace ferry {

WeightView CpuOps::resident_matmul(const WeightView& host) {
  if (!options_.repack || !host.data || host.layout != WeightLayout::file ||
      !cpu::rows16_fast(host.type, host.rows))
    return host;
  for (const Repacked& r : repacked_)
    if (r.host == host.data && r.view.type == host.type && r.view.rows == host.rows &&
        r.view.cols == host.cols)
      return r.view;
  const size_t bytes =
      static_cast<size_t>(host.rows) * row_bytes(host.type, static_cast<uint64_t>(host.cols));
  if (repacked_bytes_ + bytes > options_.repack_budget) {
    if (repack_skipped_bytes_ == 0)
      log::warn("cpu: not enough free host memory to repack every {} matrix; the rest keep the "
                "file's layout (slower kernels)", type_name(host.type));
    repack_skipped_bytes_ += bytes;
    return host;
  }
  // 2 MiB-aligned and marked for transparent huge pages: the copy takes few page faults and the
  // kernels' reads few TLB misses (a hint; 4 KiB pages otherwise).
  constexpr size_t kHugePage = size_t{2} << 20;
  DeviceBuffer buf = host_buffer(bytes, kHugePage);
#ifdef MADV_HUGEPAGE
  (void)::madvise(buf.data(), (bytes + kHugePage - 1) / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  cpu::repack_rows16(host.type, host.data, host.rows, host.cols, buf.data());
  WeightView v = host;
  v.data = buf.data();
  v.layout = WeightLayout::rows16;
  repacked_bytes_ += bytes;
  if (options_.repacked) options_.repacked(host.data, bytes);
  repacked_.push_back({host.data, v, std::move(buf)});
  return v;
}

}  // namespace ferry
