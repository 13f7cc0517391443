#pragma once
// The host store: every routed expert in host RAM where the copy engine reads it fast (pinned).
// Regions are byte ranges of the GGUF file (one per layer and matrix: ffn_{gate,up,down}_exps);
// the store gives each a host pointer with the same layout, so expert e of a region starts at
// data(r) + e·stride as in the file.
//
// Loading modes (--host-load):
//   uring  — read the file into pinned memory with io_uring, O_DIRECT where the file system allows
//            it (aligned chunks, several reads in flight); the default for cuda.
//   mmap   — memcpy from the file mapping into pinned memory (for comparison: page-cache speed).
//   alias  — no copy: the regions are the mapping itself. The default on the sim device, whose
//            "copies" are host memcpys anyway, so pinning buys nothing there; the mapping is not
//            page-locked, which on CUDA would make every transfer a slow pageable one.
// Pinning failure falls back to pageable memory with a warning (Device::alloc_host). Before
// allocating, MemAvailable (/proc/meminfo) is checked: ErrorKind::budget when the experts do not
// fit, saying how much is missing.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/core/host_memory.hpp"
#include "offload/offload.hpp"

namespace ferry {

// alias: the file mapping as it is (pageable); registered: the mapping page-locked in place by the
// device (no copy; the pages are faulted in once); mmap / uring: copied into pinned memory.

struct StoreRegion {
  uint64_t file_offset = 0;  // absolute offset in the file
  uint64_t bytes = 0;
  const uint8_t* mapped = nullptr;  // the same bytes in the file mapping
};

struct HostStoreStats {
  uint64_t bytes = 0;  // expert bytes held
  double load_ms = 0;
  double load_gbps = 0;  // bytes / load time (0 for alias)
  bool pinned = false;
  bool direct_io = false;  // uring read with O_DIRECT
  HostLoad mode = HostLoad::alias;
};

// fraction done in [0, 1]; called from the loading thread.
using StoreProgress = std::function<void(double fraction)>;

class HostStore {
 public:
  // device may be null only for alias. ErrorKind::io naming the file on a failed read.
  HostStore(Device* device, const std::string& path, std::vector<StoreRegion> regions,
            HostLoad mode, const StoreProgress& progress = {});
  const uint8_t* data(size_t region) const { return ptr_[region]; }
  size_t n_regions() const { return ptr_.size(); }
  const HostStoreStats& stats() const { return stats_; }

 private:
  void load_mmap(const std::vector<StoreRegion>& regions, const StoreProgress& progress);
  void load_uring(const std::string& path, const std::vector<StoreRegion>& regions,
                  const StoreProgress& progress);

  HostBuffer buf_;
  std::vector<HostRegistration> registrations_;  // registered: the regions' pages, merged into runs
  std::vector<const uint8_t*> ptr_;  // (n_regions)
  std::vector<uint64_t>
      buf_off_;  // (n_regions) where region r's first aligned file byte lands in buf_
  HostStoreStats stats_;
};

// ErrorKind::budget when `bytes` exceed MemAvailable minus a reserve (what = what they are for).
void check_host_memory(uint64_t bytes, std::string_view what);

}  // namespace ferry
