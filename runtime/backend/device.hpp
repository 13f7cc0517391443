#pragma once
// The Device abstraction: memory with a hard budget, streams, events, async copies, pinned host
// memory. Two implementations: `cuda` (cuda_device.cpp) and `sim` (sim_device.cpp), the same
// interface on the host so the offload engine runs and is tested without a GPU.
//
// Ordering rules (both implementations):
//  - Work enqueued on one Stream runs in enqueue order. Streams run concurrently with each other.
//  - Stream::wait(e) makes later work on that stream wait for the most recent record(e) issued
//    before the wait call (CUDA semantics). An event never recorded counts as complete.
//  - host_fn runs on a host thread in stream order; it must not call into the Device. An exception
//    it throws is kept and rethrown by the stream's next synchronize().
//  - Buffers, streams and events must not outlive the Device that made them.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/backend/device_budget.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/backend/ops.hpp"  // DeviceBuffer

namespace ferry {

enum class DeviceKind { cpu, sim, cuda };

const char* device_kind_name(DeviceKind k);
// "cuda" | "cpu" | "sim" | "auto" ("auto" → default_device_kind()); anything else: invalid_arg.
DeviceKind parse_device_kind(std::string_view s);
// True when Ferry was built with CUDA and a CUDA device is usable here.
bool cuda_available();
// cuda when cuda_available(), else cpu; an emulator build answers cpu unless FERRY_CUDA_EMU_MEMORY
// is set (device.cpp says why).
DeviceKind default_device_kind();

struct CopyStats {
  uint64_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0;
  uint64_t h2d_copies = 0, d2h_copies = 0, d2d_copies = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  virtual bool query() = 0;        // the last record has completed (or there was none)
  virtual void synchronize() = 0;  // host waits for the last record
  // Milliseconds between `start` and this event (both recorded and completed).
  virtual double elapsed_ms_since(const Event& start) const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // Asynchronous copies; the source must stay valid and unchanged until the copy has run.
  virtual void copy_h2d(void* dst_device, const void* src_host, size_t bytes) = 0;
  virtual void copy_d2h(void* dst_host, const void* src_device, size_t bytes) = 0;
  virtual void copy_d2d(void* dst_device, const void* src_device, size_t bytes) = 0;
  virtual void memset(void* dst_device, int value, size_t bytes) = 0;
  virtual void host_fn(std::function<void()> fn) = 0;
  virtual void record(Event& e) = 0;
  virtual void wait(const Event& e) = 0;
  virtual void synchronize() = 0;
  // cudaStream_t for cuda (for kernel launches), nullptr for sim.
  virtual void* native_handle() = 0;
};

// Host memory for copies: pinned when the device could pin it, pageable otherwise (`pinned` says
// which). Move-only; freed through the device.
class HostBuffer {
 public:
  using Free = std::function<void(void*)>;
  HostBuffer() = default;
  HostBuffer(void* p, size_t bytes, bool pinned, Free free)
      : p_(p), bytes_(bytes), pinned_(pinned), free_(std::move(free)) {}
  HostBuffer(HostBuffer&& o) noexcept { swap(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    HostBuffer t(std::move(o));
    swap(t);
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() {
    if (p_ && free_) free_(p_);
  }
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void swap(HostBuffer& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    std::swap(pinned_, o.pinned_);
    std::swap(free_, o.free_);
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
  Free free_;
};

// Page-locks existing host memory (an mmapped expert store) for fast copies and in-place device
// reads (mapped; read-only where the device allows, so a PROT_READ file mapping can be registered),
// until destroyed.
// registered() is false when the device could not pin it (a warning was logged; copies still work).
class HostRegistration {
 public:
  HostRegistration() = default;
  HostRegistration(void* p, bool registered, std::function<void(void*)> undo)
      : p_(p), registered_(registered), undo_(std::move(undo)) {}
  HostRegistration(HostRegistration&& o) noexcept { swap(o); }
  HostRegistration& operator=(HostRegistration&& o) noexcept {
    HostRegistration t(std::move(o));
    swap(t);
    return *this;
  }
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration() {
    if (registered_ && undo_) undo_(p_);
  }
  bool registered() const { return registered_; }

 private:
  void swap(HostRegistration& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(registered_, o.registered_);
    std::swap(undo_, o.undo_);
  }
  void* p_ = nullptr;
  bool registered_ = false;
  std::function<void(void*)> undo_;
};

// Bandwidth/latency model of the sim device's host↔device link (0 GB/s = no model: copies run at
// memcpy speed). Copies in one direction share the link: they queue behind each other, as on a
// real copy engine. Example: a PCIe 4.0 x8 consumer card ≈ 13 GB/s + 10 µs.
struct SimLinkModel {
  double h2d_gbps = 0;
  double d2h_gbps = 0;
  double latency_us = 0;
};

struct DeviceOptions {
  // Hard limit on device memory Ferry allocates (all pools together). 0 = cuda: the free memory
  // when the device is opened; sim: unlimited.
  uint64_t budget_bytes = 0;
  int cuda_device = 0;
  SimLinkModel sim_link;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;

  // Device memory, aligned to 256 bytes, charged to the budget (rounded up to 256 bytes). Exceeding
  // the budget throws ErrorKind::budget naming the request, the use and the budget; nothing spills.
  DeviceBuffer alloc(size_t bytes, std::string_view tag = "buffer");
  MemoryStats memory() const { return budget_.stats(); }
  void reset_peak() { budget_.reset_peak(); }
  CopyStats copies() const;

  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // pinned=true tries to page-lock (cudaMallocHost); on failure it warns and returns pageable memory.
  virtual HostBuffer alloc_host(size_t bytes, bool pinned = true) = 0;
  virtual HostRegistration register_host(void* p, size_t bytes) = 0;
  // The address through which device kernels read host memory in place (mapped pinned memory:
  // cudaMallocHost'd or registered), or nullptr when the device cannot (pageable memory). sim:
  // the host address itself (its kernels run on the host).
  virtual const void* mapped_view(const void* host) = 0;
  virtual void synchronize() = 0;  // all streams of this device

 protected:
  explicit Device(std::string budget_name, uint64_t budget_bytes) : budget_(std::move(budget_name), budget_bytes) {}
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* p) noexcept = 0;
  void count_copy(int direction, size_t bytes);  // 0 h2d, 1 d2h, 2 d2d

  BudgetTracker budget_;

 private:
  std::atomic<uint64_t> copy_bytes_[3] = {0, 0, 0};
  std::atomic<uint64_t> copy_count_[3] = {0, 0, 0};
};

// Opens a device. cpu has no Device (the CPU backend computes on host memory): invalid_arg.
// cuda without a usable GPU, or in a build without CUDA: ErrorKind::device / unsupported.
std::unique_ptr<Device> make_device(DeviceKind kind, const DeviceOptions& options = {});

}  // namespace ferry
