#include "offload/host_store.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace ferry {
namespace {

// O_DIRECT wants offsets, lengths and buffers aligned to the logical block size; 4 KiB covers
// every common device. Reads of 1 MiB with 16 in flight keep an NVMe queue busy.
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kChunk = 1 << 20;
constexpr unsigned kDepth = 16;

uint64_t down_align(uint64_t x) {
  return x / kAlign * kAlign;
}
uint64_t up_align(uint64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class Ring {
 public:
  explicit Ring(unsigned depth) {
    const int rc = io_uring_queue_init(depth, &ring_, 0);
    if (rc < 0) fail(ErrorKind::io, "io_uring_queue_init failed: {}", std::strerror(-rc));
  }
  ~Ring() { io_uring_queue_exit(&ring_); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
};

// Whether this process may use io_uring at all (containers and seccomp profiles often forbid it).
bool uring_usable(std::string& why) {
  io_uring ring{};
  const int rc = io_uring_queue_init(1, &ring, 0);
  if (rc < 0) {
    why = std::strerror(-rc);
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

struct ReadJob {
  uint64_t file_off;  // aligned
  uint64_t len;       // aligned
  uint8_t* dst;       // aligned
  uint64_t need;      // bytes that must arrive (the rest may lie past the end of the file)
};

// Runs all reads with up to kDepth in flight. Returns -EINVAL when the file system rejected
// O_DIRECT on the first reads (the caller retries buffered), 0 on success; other errors throw.
int run_reads(int fd, const std::vector<ReadJob>& jobs, const std::string& path,
              const StoreProgress& progress, uint64_t total) {
  Ring ring(kDepth);
  size_t next = 0, done_jobs = 0;
  unsigned in_flight = 0;
  uint64_t done_bytes = 0;
  std::vector<uint64_t> got(jobs.size(), 0);
  const auto submit = [&](size_t j) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring.get());
    const ReadJob& r = jobs[j];
    io_uring_prep_read(sqe, fd, r.dst + got[j], static_cast<unsigned>(r.len - got[j]),
                       r.file_off + got[j]);
    io_uring_sqe_set_data64(sqe, j);
    ++in_flight;
  };
  while (done_jobs < jobs.size()) {
    while (in_flight < kDepth && next < jobs.size()) submit(next++);
    const int sub = io_uring_submit(ring.get());
    if (sub < 0) fail(ErrorKind::io, "{}: io_uring_submit failed: {}", path, std::strerror(-sub));
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(ring.get(), &cqe);
    if (rc < 0) fail(ErrorKind::io, "{}: io_uring_wait_cqe failed: {}", path, std::strerror(-rc));
    const auto j = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(ring.get(), cqe);
    --in_flight;
    if (res == -EINVAL && done_bytes == 0) {
      while (in_flight > 0) {  // drain before giving up on O_DIRECT
        if (io_uring_wait_cqe(ring.get(), &cqe) < 0) break;
        io_uring_cqe_seen(ring.get(), cqe);
        --in_flight;
      }
      return -EINVAL;
    }
    if (res < 0)
      fail(ErrorKind::io, "{}: read at offset {} failed: {}", path, jobs[j].file_off + got[j],
           std::strerror(-res));
    got[j] += static_cast<uint64_t>(res);
    done_bytes += static_cast<uint64_t>(res);
    if (got[j] < jobs[j].need && res > 0) {
      submit(j);  // short read before the end of what we need: continue
      continue;
    }
    if (got[j] < jobs[j].need)
      fail(ErrorKind::io, "{}: file ends at {} inside expert data (needed up to {})", path,
           jobs[j].file_off + got[j], jobs[j].file_off + jobs[j].need);
    ++done_jobs;
    if (progress)
      progress(std::min(1.0, static_cast<double>(done_bytes) / static_cast<double>(total)));
  }
  if (progress) progress(1.0);  // the last aligned chunk may stop short at the end of the file
  return 0;
}

}  // namespace

const char* host_load_name(HostLoad m) { return name_of(kHostLoads, m); }

void check_host_memory(uint64_t bytes, std::string_view what) {
  const std::optional<uint64_t> usable_or = host_mem_usable();
  if (!usable_or) return;  // unknown: let the allocation decide
  const uint64_t usable = *usable_or, avail = host_mem_available();
  if (bytes > usable)
    fail(ErrorKind::budget,
         "{} need {} of host RAM but only {} is available (MemAvailable {} minus a {} reserve): "
         "missing {}. Free "
         "memory, use a smaller model or quantization, or keep more experts in VRAM (a disk tier "
         "is not there yet)",
         what, format_size(bytes), format_size(usable), format_size(avail),
         format_size(kHostMemReserveBytes), format_size(bytes - usable));
}

HostStore::HostStore(Device* device, const std::string& path, std::vector<StoreRegion> regions,
                     HostLoad mode, const StoreProgress& progress) {
  stats_.mode = mode;
  for (const auto& r : regions) stats_.bytes += r.bytes;
  if (mode == HostLoad::alias) {
    for (const auto& r : regions) ptr_.push_back(r.mapped);
    if (progress) progress(1.0);
    return;
  }
  if (!device)
    fail(ErrorKind::internal, "host store: loading mode {} needs a device", host_load_name(mode));
  if (mode == HostLoad::registered) {
    // The regions' pages, merged into runs (neighbouring regions may share a page, which must not
    // be registered twice; the dense tensors between layers are left alone).
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    std::vector<std::pair<uintptr_t, uintptr_t>> runs;
    for (const auto& r : regions) {
      ptr_.push_back(r.mapped);
      const auto a = reinterpret_cast<uintptr_t>(r.mapped);
      runs.emplace_back(a / page * page, (a + r.bytes + page - 1) / page * page);
    }
    std::sort(runs.begin(), runs.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    uint64_t pinned_bytes = 0;
    for (const auto& r : runs) {
      if (!merged.empty() && r.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    for (const auto& m : merged) pinned_bytes += m.second - m.first;
    check_host_memory(pinned_bytes, "the routed experts of " + path + " (registered)");
    const auto t0 = std::chrono::steady_clock::now();
    stats_.pinned = true;
    for (const auto& m : merged) {
      registrations_.push_back(device->register_host(reinterpret_cast<void*>(m.first), m.second - m.first));
      stats_.pinned = stats_.pinned && registrations_.back().registered();
    }
    stats_.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.load_gbps = stats_.load_ms > 0 ? static_cast<double>(stats_.bytes) / (stats_.load_ms * 1e6) : 0.0;
    if (progress) progress(1.0);
    return;
  }
  uint64_t total = 0;
  for (const auto& r : regions) {
    buf_off_.push_back(total);
    total += up_align(r.file_offset + r.bytes) - down_align(r.file_offset);
  }
  check_host_memory(total, "the routed experts of " + path);
  const auto t0 = std::chrono::steady_clock::now();
  buf_ = device->alloc_host(total + kAlign, /*pinned=*/true);
  stats_.pinned = buf_.pinned();
  auto* base = reinterpret_cast<uint8_t*>(up_align(reinterpret_cast<uintptr_t>(buf_.data())));
  for (size_t i = 0; i < regions.size(); ++i)
    ptr_.push_back(base + buf_off_[i] +
                   (regions[i].file_offset - down_align(regions[i].file_offset)));
  std::string why;
  if (mode == HostLoad::uring && !uring_usable(why)) {
    log::warn("host store: io_uring is not available here ({}); filling the store from the mapping instead", why);
    stats_.mode = mode = HostLoad::mmap;
  }
  if (mode == HostLoad::mmap)
    load_mmap(regions, progress);
  else
    load_uring(path, regions, progress);
  stats_.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  stats_.load_gbps =
      stats_.load_ms > 0 ? static_cast<double>(stats_.bytes) / (stats_.load_ms * 1e6) : 0.0;
}

void HostStore::load_mmap(const std::vector<StoreRegion>& regions, const StoreProgress& progress) {
  uint64_t done = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const StoreRegion& r = regions[i];
    auto* dst = const_cast<uint8_t*>(ptr_[i]);
    // Several threads fault the mapping in parallel (one thread tops out far below DRAM speed).
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, r.bytes, kChunk),
                      [&](const tbb::blocked_range<uint64_t>& b) {
                        std::memcpy(dst + b.begin(), r.mapped + b.begin(), b.end() - b.begin());
                      });
    done += r.bytes;
    if (progress)
      progress(static_cast<double>(done) /
               static_cast<double>(std::max<uint64_t>(stats_.bytes, 1)));
  }
}

void HostStore::load_uring(const std::string& path, const std::vector<StoreRegion>& regions,
                           const StoreProgress& progress) {
  std::vector<ReadJob> jobs;
  uint64_t total = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const uint64_t a0 = down_align(regions[i].file_offset),
                   a1 = up_align(regions[i].file_offset + regions[i].bytes);
    const uint64_t need_end = regions[i].file_offset + regions[i].bytes;
    uint8_t* dst = const_cast<uint8_t*>(ptr_[i]) - (regions[i].file_offset - a0);
    for (uint64_t off = a0; off < a1; off += kChunk) {
      const uint64_t len = std::min(kChunk, a1 - off);
      const uint64_t need = need_end > off ? std::min(len, need_end - off) : 0;
      jobs.push_back({off, len, dst + (off - a0), need});
      total += len;
    }
  }
  {
    Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    if (fd.get() >= 0 && run_reads(fd.get(), jobs, path, progress, total) == 0) {
      stats_.direct_io = true;
      return;
    }
  }
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(ErrorKind::io, "cannot open {}: {}", path, std::strerror(errno));
  if (run_reads(fd.get(), jobs, path, progress, total) != 0)
    fail(ErrorKind::io, "{}: buffered io_uring read rejected (EINVAL)", path);
}

}  // namespace ferry
