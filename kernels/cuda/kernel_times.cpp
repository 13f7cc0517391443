#include "kernels/cuda/kernel_times.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kernel_name.hpp"

namespace ferry::cuda {
namespace detail {

// Off until a program turns it on (ferry bench --kernel-times, bench_gpu_e2e --kernel-times):
// nothing in kernels/ reads the environment (docs/options.md).
std::atomic<bool> kernel_times_on{false};

}  // namespace detail

namespace {

struct Record {
  const void* kernel;
  cudaStream_t stream;
  cudaEvent_t begin, end;
  bool ended = false;  // false while the launch is between begin() and end() on another thread
};

// A slot names a record of one take's generation: a launch that began before a take (on another
// host thread) must not close a record of the next generation.
constexpr unsigned kSlotIndexBits = 40;
size_t slot_of(uint64_t generation, size_t index) {
  return (generation << kSlotIndexBits) | index;
}

// The records since the last take and the pool of idle events. One lock: launches may come from
// several host threads (the offload engine's), and the timer is off in normal runs.
class Timer {
 public:
  // Never destroyed: its events stay valid to the end of the process, and no CUDA call runs in a
  // static destructor after the runtime may be gone.
  static Timer& get() {
    static Timer* t = new Timer;
    return *t;
  }

  size_t begin(const void* kernel, cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    FERRY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    std::lock_guard lk(mu_);
    if (capture != cudaStreamCaptureStatusNone) {
      ++untimed_;
      return detail::kUntimed;
    }
    Record r{kernel, stream, pooled(), pooled()};
    FERRY_CUDA_CHECK(cudaEventRecord(r.begin, stream));
    records_.push_back(r);
    return slot_of(generation_, records_.size() - 1);
  }

  void end(size_t slot, cudaStream_t stream) {
    std::lock_guard lk(mu_);
    const size_t index = slot & ((size_t{1} << kSlotIndexBits) - 1);
    if (slot_of(generation_, index) != slot || index >= records_.size()) return;  // taken meanwhile
    FERRY_CUDA_CHECK(cudaEventRecord(records_[index].end, stream));
    records_[index].ended = true;
  }

  KernelTimes take() {
    std::lock_guard lk(mu_);
    // The last end event of each stream completes after all of that stream's earlier ones.
    std::unordered_map<cudaStream_t, cudaEvent_t> last;
    for (const Record& r : records_)
      if (r.ended) last[r.stream] = r.end;
    for (const auto& [stream, ev] : last) FERRY_CUDA_CHECK(cudaEventSynchronize(ev));
    std::unordered_map<const void*, KernelTime> by_kernel;
    uint64_t in_flight = 0;
    for (const Record& r : records_) {
      free_.push_back(r.begin);
      free_.push_back(r.end);
      if (!r.ended) {  // still being launched on another thread: its end is never recorded
        ++in_flight;
        continue;
      }
      float ms = 0;
      FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, r.begin, r.end));
      KernelTime& k = by_kernel[r.kernel];
      ++k.launches;
      k.total_us += 1000.0 * static_cast<double>(ms);
    }
    records_.clear();
    ++generation_;
    // Instantiations that shorten to one name are summed under it.
    std::map<std::string, KernelTime> by_name;
    for (auto& [kernel, k] : by_kernel) {
      auto [it, fresh] = by_name.try_emplace(name_of(kernel));
      it->second.launches += k.launches;
      it->second.total_us += k.total_us;
    }
    KernelTimes out;
    for (auto& [name, k] : by_name) {
      k.name = name;
      out.kernels.push_back(std::move(k));
    }
    std::stable_sort(
        out.kernels.begin(), out.kernels.end(),
        [](const KernelTime& a, const KernelTime& b) { return a.total_us > b.total_us; });
    out.untimed_launches = std::exchange(untimed_, 0) + in_flight;
#if defined(FERRY_CUDA_EMU)
    out.emulated = true;
#endif
    return out;
  }

  uint64_t created() {
    std::lock_guard lk(mu_);
    return created_;
  }

  // Names a key that is not a kernel function (time_named_begin).
  void name(const void* key, const char* name) {
    std::lock_guard lk(mu_);
    names_.try_emplace(key, name);
  }

 private:
  cudaEvent_t pooled() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    FERRY_CUDA_CHECK(cudaEventCreate(&e));
    ++created_;
    return e;
  }
  const std::string& name_of(const void* kernel) {
    auto it = names_.find(kernel);
    if (it == names_.end()) it = names_.emplace(kernel, kernel_name(kernel)).first;
    return it->second;
  }

  std::mutex mu_;
  std::vector<Record> records_;
  std::vector<cudaEvent_t> free_;
  std::unordered_map<const void*, std::string> names_;
  uint64_t untimed_ = 0, created_ = 0, generation_ = 0;
};

}  // namespace

void set_kernel_times(bool on) {
  detail::kernel_times_on.store(on, std::memory_order_relaxed);
}
bool kernel_times_enabled() {
  return detail::kernel_times_on.load(std::memory_order_relaxed);
}
KernelTimes take_kernel_times() {
  return Timer::get().take();
}
uint64_t kernel_timer_events_created() {
  return Timer::get().created();
}

namespace detail {
size_t time_launch_begin(const void* kernel, void* stream) {
  return Timer::get().begin(kernel, static_cast<cudaStream_t>(stream));
}
size_t time_named_begin(const char* name, void* stream) {
  Timer::get().name(name, name);
  return Timer::get().begin(name, static_cast<cudaStream_t>(stream));
}
void time_launch_end(size_t slot, void* stream) {
  Timer::get().end(slot, static_cast<cudaStream_t>(stream));
}
}  // namespace detail

}  // namespace ferry::cuda
