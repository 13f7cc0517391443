// The CUDA emulator's runtime (tests/cuda_emu/README.md): devices, memory, streams, events and
// cuBLAS's GemmEx on the host, with the ordering rules Ferry relies on:
//  - each created stream is a FIFO worker thread, so work on different streams really overlaps
//    (a missing event wait shows up as a race, as on a GPU);
//  - the legacy default stream (0) waits for all blocking streams and runs its work inline;
//  - an event wait captures the event's latest record at call time (a wait on a never-recorded
//    event is a no-op);
//  - copies from pageable host memory are staged at the call (the caller may reuse the buffer),
//    copies to pageable host memory complete before the call returns; page-locked buffers are
//    read/written when the stream gets there;
//  - device memory has a capacity (FERRY_CUDA_EMU_MEMORY, default 8 GiB); every copy, memset and
//    kernel pointer argument is checked against the allocations, page-locked host memory
//    included, and a range outside them fails the call (cudaErrorInvalidValue /
//    cudaErrorInvalidDevicePointer) with a message on stderr.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/cuda_emu/emu.hpp"
#include "tests/cuda_emu/emu_internal.hpp"
#include "ferry_emu_counters.h"
#include "cublas_v2.h"

struct CUgraph_st;
struct CUevent_st {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;  // records issued
  uint64_t completed = 0;  // records reached by their stream
  std::chrono::steady_clock::time_point when{};
  uint64_t captured_in = 0;  // the capture id of its last record, if captured (0: not captured)
};

namespace ferry_emu {
namespace {

using Op = std::function<void()>;

// A captured operation and its node kind: the kernel's function, or one of the tags below
// (cudaGraphExecUpdate requires the same kinds in the same order).
struct GraphNode {
  const void* kind;
  Op op;
};
const char kCopyNode = 0, kMemsetNode = 0, kHostNode = 0, kEventNode = 0;

}  // namespace
}  // namespace ferry_emu

struct CUgraph_st {
  std::vector<ferry_emu::GraphNode> nodes;
  uint64_t capture_id = 0;  // which capture made it (events remember ids, not addresses)
};
struct CUgraphExec_st {
  std::vector<ferry_emu::GraphNode> nodes;
};

namespace ferry_emu {
namespace {

struct Stream;

struct Range {
  size_t bytes;
  bool device;  // cudaMalloc (else page-locked host memory)
};

class Runtime {
 public:
  static Runtime& get() {
    static Runtime r;
    return r;
  }

  size_t capacity() const { return capacity_; }

  // ---- memory bookkeeping
  cudaError_t add_range(void* p, size_t bytes, bool device) {
    std::lock_guard lk(mu_);
    const auto b = reinterpret_cast<uintptr_t>(p);
    auto it = ranges_.upper_bound(b);
    if (it != ranges_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > b)
      return device ? cudaErrorMemoryAllocation : cudaErrorHostMemoryAlreadyRegistered;
    if (it != ranges_.end() && it->first < b + bytes) return cudaErrorHostMemoryAlreadyRegistered;
    if (device) {
      if (used_ + bytes > capacity_) return cudaErrorMemoryAllocation;
      used_ += bytes;
      peak_ = std::max(peak_, used_);
    }
    ranges_[b] = Range{bytes, device};
    return cudaSuccess;
  }
  bool remove_range(void* p, bool device) {
    std::lock_guard lk(mu_);
    auto it = ranges_.find(reinterpret_cast<uintptr_t>(p));
    if (it == ranges_.end() || it->second.device != device) return false;
    if (device) used_ -= it->second.bytes;
    ranges_.erase(it);
    return true;
  }
  // The range holding [p, p + bytes), or none. `bytes` may be 0 (a pointer one past the end).
  // A copy: another thread may free the range meanwhile.
  std::optional<Range> find(const void* p, size_t bytes) const {
    std::lock_guard lk(mu_);
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    if (a + bytes > it->first + it->second.bytes) return std::nullopt;
    return it->second;
  }
  size_t used() const {
    std::lock_guard lk(mu_);
    return used_;
  }

  // ---- streams
  void register_stream(Stream* s) {
    std::lock_guard lk(mu_);
    streams_.insert(s);
  }
  void unregister_stream(Stream* s) {
    std::lock_guard lk(mu_);
    streams_.erase(s);
  }
  std::vector<Stream*> streams(bool blocking_only) const;

  // Sticky errors from work that ran on a worker thread (a kernel deadlock): reported by the next
  // synchronising call, as a GPU fault would be.
  void set_sticky(cudaError_t e, const std::string& why) {
    std::lock_guard lk(mu_);
    if (sticky_ == cudaSuccess) {
      sticky_ = e;
      std::fprintf(stderr, "cuda emulator: %s\n", why.c_str());
    }
  }
  cudaError_t sticky() const {
    std::lock_guard lk(mu_);
    return sticky_;
  }
  void clear_sticky() {
    std::lock_guard lk(mu_);
    sticky_ = cudaSuccess;
  }

 private:
  Runtime() {
    capacity_ = size_t{8} << 30;
    if (const char* m = std::getenv("FERRY_CUDA_EMU_MEMORY")) capacity_ = std::strtoull(m, nullptr, 10) << 20;
  }
  // FERRY_CUDA_EMU_REPORT=1: the device memory high-water mark at exit, every allocation counted
  // (the budget tracker's peak misses what bypasses it), for tests of the memory a run really used.
  ~Runtime() {
    if (std::getenv("FERRY_CUDA_EMU_REPORT"))
      std::fprintf(stderr, "cuda emulator: device memory peak %zu bytes of %zu\n", peak_, capacity_);
  }
  mutable std::mutex mu_;
  std::map<uintptr_t, Range> ranges_;
  size_t used_ = 0, peak_ = 0, capacity_ = 0;
  std::set<Stream*> streams_;
  cudaError_t sticky_ = cudaSuccess;
};

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t result(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

// ---- streams: one worker thread each
struct Stream {
  explicit Stream(bool blocking) : blocking(blocking) {
    Runtime::get().register_stream(this);
    worker = std::thread([this] { loop(); });
  }
  ~Stream() {
    synchronize();
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
    Runtime::get().unregister_stream(this);
  }
  void push(Op op) {
    {
      std::lock_guard lk(mu);
      queue.push_back(std::move(op));
      ++issued;
    }
    cv.notify_all();
  }
  void synchronize() {
    std::unique_lock lk(mu);
    const uint64_t target = issued;
    cv.wait(lk, [&] { return finished >= target; });
  }
  bool idle() {
    std::lock_guard lk(mu);
    return finished == issued;
  }
  void loop() {
    for (;;) {
      Op op;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        op = std::move(queue.front());
        queue.pop_front();
      }
      try {
        op();
      } catch (const std::exception& e) {
        Runtime::get().set_sticky(cudaErrorLaunchFailure, e.what());
      }
      {
        std::lock_guard lk(mu);
        ++finished;
      }
      cv.notify_all();
    }
  }

  const bool blocking;
  // Stream capture (owned by the capturing thread; see cudaStreamBeginCapture).
  CUgraph_st* capture = nullptr;
  bool capture_invalid = false;
  bool capture_strict = false;  // global / thread-local mode
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op> queue;
  uint64_t issued = 0, finished = 0;
  bool stop = false;
  std::thread worker;
};

std::vector<Stream*> Runtime::streams(bool blocking_only) const {
  std::lock_guard lk(mu_);
  std::vector<Stream*> out;
  for (Stream* s : streams_)
    if (!blocking_only || s->blocking) out.push_back(s);
  return out;
}

Stream* as_stream(cudaStream_t s) { return reinterpret_cast<Stream*>(s); }

// The strict-mode captures this thread began and has not ended.
thread_local std::vector<Stream*> captures_of_thread;

// A call that is not allowed on a capturing stream: invalidates its capture, as the driver does.
cudaError_t invalidate_capture(Stream* st, cudaError_t err, const char* what) {
  st->capture_invalid = true;
  std::fprintf(stderr, "cuda emulator: %s (capture invalidated)\n", what);
  return result(err);
}

// All work queued on blocking streams has run (what the legacy default stream waits for).
void drain_blocking_streams() {
  for (Stream* b : Runtime::get().streams(true)) b->synchronize();
}

// A call that is not allowed while this thread captures (a sync, an allocation, the legacy
// stream): invalidates the captures, as the driver does, and returns the error to report.
cudaError_t capture_violation(cudaError_t err, const char* what) {
  bool any = false;
  for (Stream* c : captures_of_thread)
    if (c->capture_strict) {
      c->capture_invalid = true;
      any = true;
    }
  if (!any) return cudaSuccess;
  std::fprintf(stderr, "cuda emulator: %s during stream capture (capture invalidated)\n", what);
  return result(err);
}

// Runs `op` in stream order: queued on a created stream (or recorded, while it is captured); on
// the legacy default stream, after all blocking streams drained, on the calling thread.
cudaError_t submit(cudaStream_t s, Op op, const void* kind = &kHostNode) {
  if (cudaError_t e = Runtime::get().sticky(); e != cudaSuccess) return result(e);
  if (s && as_stream(s)->capture) {
    Stream* st = as_stream(s);
    if (st->capture_invalid) return result(cudaErrorStreamCaptureInvalidated);
    st->capture->nodes.push_back(GraphNode{kind, std::move(op)});
    return cudaSuccess;
  }
  if (s) {
    as_stream(s)->push(std::move(op));
    return cudaSuccess;
  }
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureImplicit, "work on the legacy default stream"); e != cudaSuccess)
    return e;
  drain_blocking_streams();
  try {
    op();
  } catch (const std::exception& e) {
    Runtime::get().set_sticky(cudaErrorLaunchFailure, e.what());
    return result(cudaErrorLaunchFailure);
  }
  return cudaSuccess;
}

cudaError_t wait_stream(cudaStream_t s) {
  if (s && as_stream(s)->capture)
    return invalidate_capture(as_stream(s), cudaErrorStreamCaptureUnsupported, "synchronising a capturing stream");
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "a synchronising call"); e != cudaSuccess)
    return e;
  if (s)
    as_stream(s)->synchronize();
  else
    drain_blocking_streams();
  return result(Runtime::get().sticky());
}

// ---- copies
bool is_pinned_or_device(const void* p, size_t n) { return Runtime::get().find(p, n).has_value(); }

bool check_device_range(const void* p, size_t n, const char* what) {
  if (Runtime::get().find(p, n)) return true;
  std::fprintf(stderr, "cuda emulator: %s range [%p, +%zu) is not inside one device or page-locked allocation\n", what, p, n);
  return false;
}

struct Counters {
  std::atomic<uint64_t> stream_syncs{0}, pageable_waits{0}, event_syncs{0}, device_syncs{0}, d2h_copies{0},
      d2h_bytes{0}, graph_launches{0}, kernels{0}, copies{0}, memsets{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

cudaMemcpyKind infer_kind(void* dst, const void* src, size_t n) {
  const std::optional<Range> d = Runtime::get().find(dst, n);
  const std::optional<Range> s = Runtime::get().find(src, n);
  const bool dd = d && d->device, sd = s && s->device;
  if (dd && sd) return cudaMemcpyDeviceToDevice;
  if (dd) return cudaMemcpyHostToDevice;
  if (sd) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}

// The FERRY_CUDA_EMU_TRACE file (trace_kernel, below, says what it holds), and its host-call lines.
FILE* trace_file() {
  static FILE* out = [] {
    const char* f = std::getenv("FERRY_CUDA_EMU_TRACE");
    return f && *f ? std::fopen(f, "w") : nullptr;
  }();
  return out;
}
std::mutex& trace_mutex() {
  static std::mutex mu;
  return mu;
}

void trace_api(const char* what, size_t bytes = 0) {
  FILE* out = trace_file();
  if (!out) return;
  std::lock_guard lk(trace_mutex());
  std::fprintf(out, "api %s %zu\n", what, bytes);
  std::fflush(out);
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s, bool sync) {
  if (n == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) kind = infer_kind(dst, src, n);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if ((dst_dev && !check_device_range(dst, n, "copy destination")) ||
      (src_dev && !check_device_range(src, n, "copy source")))
    return result(cudaErrorInvalidValue);
  const bool capturing = s && as_stream(s)->capture;
  const bool d2h = src_dev && !dst_dev;
  // Host sides in pageable memory (looked up once: each lookup takes the runtime's lock).
  const bool src_pageable = !src_dev && !is_pinned_or_device(src, n);
  const bool dst_pageable = !dst_dev && !is_pinned_or_device(dst, n);
  const bool pageable = src_pageable || dst_pageable;
  if (!capturing) {
    trace_api(kind == cudaMemcpyHostToDevice   ? (pageable ? "copy_h2d_pageable" : "copy_h2d")
              : kind == cudaMemcpyDeviceToHost ? (pageable ? "copy_d2h_pageable" : "copy_d2h")
              : kind == cudaMemcpyDeviceToDevice ? "copy_d2d"
                                                 : "copy_h2h",
              n);
  }
  if (capturing && pageable) {
    // A graph replays the copy later: it cannot stage or wait for pageable memory.
    return invalidate_capture(as_stream(s), cudaErrorStreamCaptureUnsupported, "a pageable-memory copy captured into a graph");
  }
  if (src_pageable) {
    // Pageable source: staged now, as the driver does.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + n);
    if (cudaError_t e = submit(s,
                               [dst, staged] {
                                 counters().copies.fetch_add(1, std::memory_order_relaxed);
                                 std::memcpy(dst, staged->data(), staged->size());
                               },
                               &kCopyNode);
        e != cudaSuccess)
      return e;
  } else if (cudaError_t e = submit(s,
                                    [dst, src, n, d2h] {
                                      counters().copies.fetch_add(1, std::memory_order_relaxed);
                                      if (d2h) {
                                        counters().d2h_copies.fetch_add(1, std::memory_order_relaxed);
                                        counters().d2h_bytes.fetch_add(n, std::memory_order_relaxed);
                                      }
                                      std::memcpy(dst, src, n);
                                    },
                                    &kCopyNode);
             e != cudaSuccess) {
    return e;
  }
  // Synchronous calls, and copies into pageable memory, return when the data is there.
  if (capturing) return cudaSuccess;
  if (sync || dst_pageable) {
    // A synchronous copy is a host synchronisation; an asynchronous one into pageable memory waits
    // as the driver's does, counted apart.
    (sync ? counters().stream_syncs : counters().pageable_waits).fetch_add(1, std::memory_order_relaxed);
    return wait_stream(s);
  }
  return cudaSuccess;
}

}  // namespace

// ---- the device side's hooks (emu.hpp)
bool device_accessible(const void* p, int arg_index) {
  if (!p || Runtime::get().find(p, 0)) return true;
  std::fprintf(stderr, "cuda emulator: kernel argument %d (%p) points outside device and page-locked memory\n",
               arg_index, p);
  return false;
}

void set_launch_error(cudaError_t err) { last_error = err; }

void check_device_pointer(const void* p, const char* what) {
  if (p && Runtime::get().find(p, 0)) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p", p);
  fail_block(std::string("illegal address: ") + what + " " + buf + " is not device or page-locked memory");
}

// FERRY_CUDA_EMU_TRACE=FILE: one line per kernel run, "OFFSET OBJECT GX,GY,GZ BX,BY,BZ SHARED"
// (the kernel's address in its binary, then its launch shape), for finding which kernels a step
// runs and how wide they are: `addr2line -f -C -e OBJECT OFFSET` names them
// (bench/emu_kernel_trace.py does it for a whole file). Host calls that cost a GPU's host time or
// stall its stream (allocations, frees, synchronisations, copies) add "api NAME BYTES" lines when
// they are made, so a step's trace shows them beside its kernels.
void trace_kernel(const void* kernel, const LaunchShape& s) {
  FILE* out = trace_file();
  if (!out) return;
  Dl_info info{};
  if (dladdr(kernel, &info) == 0 || !info.dli_fname) return;
  std::lock_guard lk(trace_mutex());
  std::fprintf(out, "%#zx %s %u,%u,%u %u,%u,%u %zu\n",
               static_cast<size_t>(reinterpret_cast<uintptr_t>(kernel) - reinterpret_cast<uintptr_t>(info.dli_fbase)),
               info.dli_fname, s.grid.x, s.grid.y, s.grid.z, s.block.x, s.block.y, s.block.z, s.shared_bytes);
  std::fflush(out);
}

void enqueue_kernel(cudaStream_t stream, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                    std::function<void()> body) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535 || shared_bytes > 48 * 1024) {
    std::fprintf(stderr, "cuda emulator: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u) shared %zu\n",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes);
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  const LaunchShape shape{grid, block, shared_bytes};
  const cudaError_t e = submit(stream, [shape, kernel, body = std::move(body)] {
    // Counted when it runs: a graph's kernel nodes count once per graph launch.
    counters().kernels.fetch_add(1, std::memory_order_relaxed);
    trace_kernel(kernel, shape);
    std::vector<unsigned char> shared(std::max<size_t>(shape.shared_bytes, 16));
    // FERRY_CUDA_EMU_ORDER=reverse runs the blocks (and each block's threads, fiber.cpp) last to
    // first: a kernel whose result depends on the order (a race a GPU may run either way) then
    // differs between the two orders.
    const bool reverse = ::ferry_emu::reverse_order();
    const unsigned nb = shape.grid.x * shape.grid.y * shape.grid.z;
    for (unsigned i = 0; i < nb; ++i) {
      const unsigned b = reverse ? nb - 1 - i : i;
      // A block's dynamic shared memory starts undefined on a GPU, not as the last block left it.
      std::memset(shared.data(), 0xFF, shared.size());
      run_block(shape, uint3{b % shape.grid.x, (b / shape.grid.x) % shape.grid.y, b / (shape.grid.x * shape.grid.y)},
                body, shared);
    }
  }, kernel);
  if (e != cudaSuccess) last_error = e;
}

ApiCounts api_counts() {
  const Counters& c = counters();
  ApiCounts a;
  a.stream_syncs = c.stream_syncs.load();
  a.pageable_waits = c.pageable_waits.load();
  a.event_syncs = c.event_syncs.load();
  a.device_syncs = c.device_syncs.load();
  a.d2h_copies = c.d2h_copies.load();
  a.d2h_bytes = c.d2h_bytes.load();
  a.graph_launches = c.graph_launches.load();
  a.kernels = c.kernels.load();
  a.copies = c.copies.load();
  a.memsets = c.memsets.load();
  return a;
}

}  // namespace ferry_emu

using namespace ferry_emu;

extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error != cudaSuccess ? last_error : Runtime::get().sticky();
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error != cudaSuccess ? last_error : Runtime::get().sticky(); }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorGraphExecUpdateFailure: return "cudaErrorGraphExecUpdateFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return cudaGetErrorName(err);
  }
}

// FERRY_CUDA_EMU_DEVICES=0 emulates a machine without a GPU.
cudaError_t cudaGetDeviceCount(int* count) {
  const char* d = std::getenv("FERRY_CUDA_EMU_DEVICES");
  *count = d ? std::atoi(d) : 1;
  return *count > 0 ? cudaSuccess : result(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : result(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return result(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "Ferry CUDA emulator");
  prop->totalGlobalMem = Runtime::get().capacity();
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->multiProcessorCount = 2;
  prop->major = 9;
  prop->minor = 0;
  prop->memoryBusWidth = 64;
  prop->memoryClockRate = 1000000;
  prop->l2CacheSize = 1 << 20;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return result(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 2; return cudaSuccess;
    case cudaDevAttrHostRegisterReadOnlySupported: *value = 1; return cudaSuccess;
  }
  return result(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceSynchronize() {
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize"); e != cudaSuccess)
    return e;
  trace_api("cudaDeviceSynchronize");
  counters().device_syncs.fetch_add(1, std::memory_order_relaxed);
  for (Stream* s : Runtime::get().streams(false)) s->synchronize();
  return result(Runtime::get().sticky());
}
cudaError_t cudaDeviceReset() {
  for (Stream* s : Runtime::get().streams(false)) s->synchronize();
  Runtime::get().clear_sticky();
  last_error = cudaSuccess;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = Runtime::get().capacity();
  *free_bytes = *total_bytes - Runtime::get().used();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaMalloc"); e != cudaSuccess) return e;
  // 256-byte aligned like cudaMalloc, but not rounded up: under AddressSanitizer a kernel that
  // reads or writes past the requested size hits the redzone (real cudaMalloc would let the
  // rounding hide it).
  trace_api("cudaMalloc", bytes);
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0) return result(cudaErrorMemoryAllocation);
  if (cudaError_t e = Runtime::get().add_range(p, bytes, true); e != cudaSuccess) {
    std::free(p);
    return result(cudaErrorMemoryAllocation);
  }
  // cudaMalloc's memory holds whatever was there before; fresh host pages are zeros, which would
  // hide a kernel that reads memory nothing wrote. 0xFF bytes read as NaN floats and -1 integers.
  std::memset(p, 0xFF, bytes);
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaFree"); e != cudaSuccess) return e;
  trace_api("cudaFree");
  cudaDeviceSynchronize();  // as cudaFree does
  if (!Runtime::get().remove_range(ptr, true)) return result(cudaErrorInvalidDevicePointer);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaMallocHost"); e != cudaSuccess) return e;
  trace_api("cudaMallocHost", bytes);
  void* p = std::aligned_alloc(4096, std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096));
  if (!p) return result(cudaErrorMemoryAllocation);
  Runtime::get().add_range(p, bytes, false);
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaFreeHost"); e != cudaSuccess) return e;
  if (!Runtime::get().remove_range(ptr, false)) return result(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned) {
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaHostRegister"); e != cudaSuccess) return e;
  if (!ptr || bytes == 0) return result(cudaErrorInvalidValue);
  return result(Runtime::get().add_range(ptr, bytes, false));
}
cudaError_t cudaHostUnregister(void* ptr) {
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaHostUnregister"); e != cudaSuccess) return e;
  return Runtime::get().remove_range(ptr, false) ? cudaSuccess : result(cudaErrorHostMemoryNotRegistered);
}
cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned) {
  const std::optional<Range> r = Runtime::get().find(host_ptr, 0);
  if (!r || r->device) return result(cudaErrorInvalidValue);
  *device_ptr = host_ptr;  // unified addressing: the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, false);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (height == 0 || width == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return result(cudaErrorInvalidValue);
  if (kind != cudaMemcpyDeviceToDevice) return result(cudaErrorInvalidValue);  // the one Ferry uses
  if (!check_device_range(dst, dpitch * (height - 1) + width, "2D copy destination") ||
      !check_device_range(src, spitch * (height - 1) + width, "2D copy source"))
    return result(cudaErrorInvalidValue);
  return submit(stream, [=] {
    counters().copies.fetch_add(1, std::memory_order_relaxed);
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<unsigned char*>(dst) + r * dpitch, static_cast<const unsigned char*>(src) + r * spitch, width);
  });
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!check_device_range(dst, bytes, "memset")) return result(cudaErrorInvalidValue);
  return submit(stream,
                [dst, value, bytes] {
                  counters().memsets.fetch_add(1, std::memory_order_relaxed);
                  std::memset(dst, value, bytes);
                },
                &kMemsetNode);
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr); e != cudaSuccess) return e;
  return wait_stream(nullptr);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = reinterpret_cast<cudaStream_t>(new Stream((flags & cudaStreamNonBlocking) == 0));
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return result(cudaErrorInvalidResourceHandle);
  delete as_stream(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  trace_api("cudaStreamSynchronize");
  counters().stream_syncs.fetch_add(1, std::memory_order_relaxed);
  return wait_stream(stream);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery"); e != cudaSuccess) return e;
  if (stream) return as_stream(stream)->idle() ? cudaSuccess : cudaErrorNotReady;
  for (Stream* b : Runtime::get().streams(true))
    if (!b->idle()) return cudaErrorNotReady;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  uint64_t target;
  {
    std::lock_guard lk(event->mu);
    target = event->recorded;
  }
  if (stream && as_stream(stream)->capture) {
    // Within one captured stream a wait for its own captured record is implied by stream order;
    // a dependency on work outside the capture is not allowed.
    if (event->captured_in == as_stream(stream)->capture->capture_id) return cudaSuccess;
    return invalidate_capture(as_stream(stream), cudaErrorStreamCaptureIsolation,
                              "a captured stream waits for an event recorded outside the capture");
  }
  if (target == 0) return cudaSuccess;
  return submit(stream, [event, target] {
    std::unique_lock lk(event->mu);
    event->cv.wait(lk, [&] { return event->completed >= target; });
  });
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  return submit(stream, [fn, user_data] { fn(user_data); });
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return result(cudaErrorInvalidResourceHandle);
  // CUDA allows destroying an event whose record is still queued; wait for it here instead.
  {
    std::unique_lock lk(event->mu);
    event->cv.wait(lk, [&] { return event->completed >= event->recorded; });
  }
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (stream && as_stream(stream)->capture) {
    // Recorded when the graph runs.
    event->captured_in = as_stream(stream)->capture->capture_id;
    return submit(stream, [event] {
      {
        std::lock_guard lk(event->mu);
        event->completed = ++event->recorded;
        event->when = std::chrono::steady_clock::now();
      }
      event->cv.notify_all();
    }, &kEventNode);
  }
  event->captured_in = 0;
  uint64_t ticket;
  {
    std::lock_guard lk(event->mu);
    ticket = ++event->recorded;
  }
  const cudaError_t e = submit(stream, [event, ticket] {
    {
      std::lock_guard lk(event->mu);
      event->completed = std::max(event->completed, ticket);
      event->when = std::chrono::steady_clock::now();
    }
    event->cv.notify_all();
  });
  if (e != cudaSuccess) {
    // Never queued: waiting for it must not hang (the error is reported to the caller).
    {
      std::lock_guard lk(event->mu);
      event->completed = std::max(event->completed, ticket);
    }
    event->cv.notify_all();
  }
  return e;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaEventQuery"); e != cudaSuccess) return e;
  std::lock_guard lk(event->mu);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;  // not an error: not recorded
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cudaError_t e = capture_violation(cudaErrorStreamCaptureUnsupported, "cudaEventSynchronize"); e != cudaSuccess)
    return e;
  trace_api("cudaEventSynchronize");
  counters().event_syncs.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lk(event->mu);
  const uint64_t target = event->recorded;
  event->cv.wait(lk, [&] { return event->completed >= target; });
  return result(Runtime::get().sticky());
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::scoped_lock lk(start->mu, end->mu);
  if (start->completed == 0 || end->completed == 0) return result(cudaErrorInvalidResourceHandle);
  if (start->completed < start->recorded || end->completed < end->recorded) return result(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!stream) return result(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  Stream* st = as_stream(stream);
  if (st->capture) return result(cudaErrorIllegalState);
  static std::atomic<uint64_t> next_capture_id{1};
  st->capture = new CUgraph_st;
  st->capture->capture_id = next_capture_id++;
  st->capture_invalid = false;
  st->capture_strict = mode != cudaStreamCaptureModeRelaxed;
  captures_of_thread.push_back(st);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!stream || !as_stream(stream)->capture) return result(cudaErrorIllegalState);
  Stream* st = as_stream(stream);
  std::unique_ptr<CUgraph_st> g(st->capture);
  st->capture = nullptr;
  std::erase(captures_of_thread, st);
  if (st->capture_invalid) return result(cudaErrorStreamCaptureInvalidated);
  *graph = g.release();
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  const Stream* st = stream ? as_stream(stream) : nullptr;
  *status = !st || !st->capture   ? cudaStreamCaptureStatusNone
            : st->capture_invalid ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return result(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  if (!exec || !graph) return result(cudaErrorInvalidValue);
  cudaGraphExecUpdateResult r = cudaGraphExecUpdateSuccess;
  if (exec->nodes.size() != graph->nodes.size()) {
    r = cudaGraphExecUpdateErrorTopologyChanged;
  } else {
    for (size_t i = 0; i < graph->nodes.size() && r == cudaGraphExecUpdateSuccess; ++i)
      if (exec->nodes[i].kind != graph->nodes[i].kind) r = cudaGraphExecUpdateErrorFunctionChanged;
  }
  if (info) *info = cudaGraphExecUpdateResultInfo{r, nullptr, nullptr};
  if (r != cudaGraphExecUpdateSuccess) return result(cudaErrorGraphExecUpdateFailure);
  exec->nodes = graph->nodes;  // the new parameters: kernel arguments, grid, copy addresses
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (!graph || !numNodes || nodes) return result(cudaErrorInvalidValue);
  *numNodes = graph->nodes.size();
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return result(cudaErrorInvalidValue);
  trace_api("cudaGraphLaunch");
  counters().graph_launches.fetch_add(1, std::memory_order_relaxed);
  auto nodes = std::make_shared<std::vector<GraphNode>>(exec->nodes);
  return submit(stream, [nodes] {
    for (const GraphNode& n : *nodes) n.op();
  });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

// ---- cuBLAS: column-major C = alpha op(A) op(B) + beta C, float accumulation in k order.
struct cublasContext {
  cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (Atype != Btype || Ctype != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || m < 0 || n < 0 || k < 0)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const size_t elem = Atype == CUDA_R_16F ? 2 : 4;
  const size_t a_cols = transa == CUBLAS_OP_N ? k : m, b_cols = transb == CUBLAS_OP_N ? n : k;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!check_device_range(A, (static_cast<size_t>(lda) * (a_cols - 1) + (transa == CUBLAS_OP_N ? m : k)) * elem, "cublasGemmEx A") ||
      !check_device_range(B, (static_cast<size_t>(ldb) * (b_cols - 1) + (transb == CUBLAS_OP_N ? k : n)) * elem, "cublasGemmEx B") ||
      !check_device_range(C, (static_cast<size_t>(ldc) * (n - 1) + m) * 4, "cublasGemmEx C"))
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  auto load = [elem](const void* base, size_t i) {
    if (elem == 4) return static_cast<const float*>(base)[i];
    return __half2float(static_cast<const __half*>(base)[i]);
  };
  const cudaError_t e = submit(handle->stream, [=] {
    counters().kernels.fetch_add(1, std::memory_order_relaxed);  // a GEMM is a kernel on a GPU too
    float* c = static_cast<float*>(C);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float acc = 0.f;
        for (int p = 0; p < k; ++p) {
          const float a = load(A, transa == CUBLAS_OP_N ? static_cast<size_t>(lda) * p + i : static_cast<size_t>(lda) * i + p);
          const float b = load(B, transb == CUBLAS_OP_N ? static_cast<size_t>(ldb) * j + p : static_cast<size_t>(ldb) * p + j);
          acc += a * b;
        }
        float& out = c[static_cast<size_t>(ldc) * j + i];
        out = be == 0.f ? al * acc : al * acc + be * out;
      }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
