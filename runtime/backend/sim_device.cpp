#include "runtime/backend/sim_device.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <utility>
#include <set>
#include <thread>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// One direction of the modelled host↔device link. A copy starts when the link is free (copies
// queue like on one copy engine) and occupies it for latency + bytes / bandwidth.
class LinkClock {
 public:
  Clock::time_point reserve(double gbps, double latency_us, size_t bytes) {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    const auto start = free_at_ > now ? free_at_ : now;
    const double seconds = latency_us * 1e-6 + static_cast<double>(bytes) / (gbps * 1e9);
    free_at_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    return free_at_;
  }

 private:
  std::mutex mu_;
  Clock::time_point free_at_{};
};

// Generation counters: record() bumps `recorded_` on the host at call time, the stream's worker
// sets `completed_` when it reaches the record. Waiters wait for the generation current at the
// time they started waiting.
class SimEvent final : public Event {
 public:
  uint64_t begin_record() {
    std::lock_guard lock(mu_);
    return ++recorded_;
  }
  void complete(uint64_t gen) {
    {
      std::lock_guard lock(mu_);
      if (gen > completed_) {
        completed_ = gen;
        time_ = Clock::now();
      }
    }
    cv_.notify_all();
  }
  void wait_for(uint64_t gen) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= gen; });
  }
  uint64_t recorded() const {
    std::lock_guard lock(mu_);
    return recorded_;
  }
  bool query() override {
    std::lock_guard lock(mu_);
    return completed_ >= recorded_;
  }
  void synchronize() override { wait_for(recorded()); }
  double elapsed_ms_since(const Event& start) const override {
    const auto* s = dynamic_cast<const SimEvent*>(&start);
    if (!s) fail(ErrorKind::invalid_arg, "sim event: elapsed time against an event of another device");
    const auto [t0, ok0] = s->completion();
    const auto [t1, ok1] = completion();
    if (!ok0 || !ok1) fail(ErrorKind::invalid_arg, "sim event: elapsed time of an event that has not completed");
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }

 private:
  std::pair<Clock::time_point, bool> completion() const {
    std::lock_guard lock(mu_);
    return {time_, completed_ > 0 && completed_ >= recorded_};
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
  Clock::time_point time_{};
};

class SimDevice;

class SimStream final : public Stream {
 public:
  explicit SimStream(SimDevice& dev);
  ~SimStream() override;
  void copy_h2d(void* dst, const void* src, size_t bytes) override;
  void copy_d2h(void* dst, const void* src, size_t bytes) override;
  void copy_d2d(void* dst, const void* src, size_t bytes) override;
  void memset(void* dst, int value, size_t bytes) override {
    enqueue([=] { std::memset(dst, value, bytes); });
  }
  void host_fn(std::function<void()> fn) override { enqueue(std::move(fn)); }
  void record(Event& e) override {
    auto* ev = dynamic_cast<SimEvent*>(&e);
    if (!ev) fail(ErrorKind::invalid_arg, "sim stream: record of an event of another device");
    const uint64_t gen = ev->begin_record();
    enqueue([ev, gen] { ev->complete(gen); });
  }
  void wait(const Event& e) override {
    auto* ev = const_cast<SimEvent*>(dynamic_cast<const SimEvent*>(&e));
    if (!ev) fail(ErrorKind::invalid_arg, "sim stream: wait on an event of another device");
    const uint64_t gen = ev->recorded();
    if (gen == 0) return;  // never recorded: complete
    enqueue([ev, gen] { ev->wait_for(gen); });
  }
  void synchronize() override;
  void* native_handle() override { return nullptr; }

  void enqueue(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  // Waits for the queue to drain without rethrowing (device-wide synchronize collects errors).
  std::exception_ptr drain();

 private:
  void copy(int dir, void* dst, const void* src, size_t bytes);
  void run();

  SimDevice& dev_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

class SimDevice final : public Device {
 public:
  explicit SimDevice(const DeviceOptions& o)
      : Device("sim device", o.budget_bytes ? o.budget_bytes : UINT64_MAX), link_(o.sim_link) {}
  ~SimDevice() override = default;

  DeviceKind kind() const override { return DeviceKind::sim; }
  std::string name() const override { return "sim"; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<SimStream>(*this); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<SimEvent>(); }

  HostBuffer alloc_host(size_t bytes, bool pinned) override {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0));
    if (!p) fail(ErrorKind::budget, "sim device: host allocation of {} failed", format_size(bytes));
    return HostBuffer(p, bytes, pinned, [](void* q) { std::free(q); });
  }
  HostRegistration register_host(void* p, size_t) override { return HostRegistration(p, true, [](void*) {}); }
  const void* mapped_view(const void* host) override { return host; }

  void synchronize() override {
    std::set<SimStream*> streams;
    {
      std::lock_guard lock(streams_mu_);
      streams = streams_;
    }
    std::exception_ptr first;
    for (auto* s : streams) {
      auto e = s->drain();
      if (e && !first) first = e;
    }
    if (first) std::rethrow_exception(first);
  }

  void add_stream(SimStream* s) {
    std::lock_guard lock(streams_mu_);
    streams_.insert(s);
  }
  void remove_stream(SimStream* s) {
    std::lock_guard lock(streams_mu_);
    streams_.erase(s);
  }
  // Blocks the calling worker until a copy of `bytes` in direction dir (0 h2d, 1 d2h) would
  // have finished on the modelled link; `work` runs first (the real memcpy).
  void modelled_copy(int dir, size_t bytes, const std::function<void()>& work) {
    const double gbps = dir == 0 ? link_.h2d_gbps : link_.d2h_gbps;
    if (gbps <= 0) {
      work();
      return;
    }
    const auto end = clocks_[dir].reserve(gbps, link_.latency_us, bytes);
    work();
    std::this_thread::sleep_until(end);
  }
  void note_copy(int dir, size_t bytes) { count_copy(dir, bytes); }

 protected:
  void* raw_alloc(size_t bytes) override {
    void* p = std::aligned_alloc(256, bytes);
    if (!p) fail(ErrorKind::budget, "sim device: host memory exhausted allocating {}", format_size(bytes));
    return p;
  }
  void raw_free(void* p) noexcept override { std::free(p); }

 private:
  SimLinkModel link_;
  LinkClock clocks_[2];
  std::mutex streams_mu_;
  std::set<SimStream*> streams_;
};

SimStream::SimStream(SimDevice& dev) : dev_(dev) {
  worker_ = std::thread([this] { run(); });
  dev_.add_stream(this);
}

SimStream::~SimStream() {
  dev_.remove_stream(this);
  {
    std::lock_guard lock(mu_);
    stop_ = true;  // the worker finishes the queued work first, like cudaStreamDestroy
  }
  cv_.notify_all();
  worker_.join();
}

void SimStream::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::exception_ptr err;
    try {
      task();
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      busy_ = false;
      if (err && !error_) error_ = err;
    }
    idle_cv_.notify_all();
  }
}

std::exception_ptr SimStream::drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  return std::exchange(error_, nullptr);
}

void SimStream::synchronize() {
  if (auto e = drain()) std::rethrow_exception(e);
}

void SimStream::copy(int dir, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (!dst || !src) fail(ErrorKind::invalid_arg, "sim stream: copy of {} with a null pointer", format_size(bytes));
  dev_.note_copy(dir, bytes);
  SimDevice* dev = &dev_;
  enqueue([dev, dir, dst, src, bytes] {
    auto work = [&] { std::memcpy(dst, src, bytes); };
    if (dir == 2) work();  // device-local copies are not modelled
    else dev->modelled_copy(dir, bytes, work);
  });
}

void SimStream::copy_h2d(void* dst, const void* src, size_t bytes) { copy(0, dst, src, bytes); }
void SimStream::copy_d2h(void* dst, const void* src, size_t bytes) { copy(1, dst, src, bytes); }
void SimStream::copy_d2d(void* dst, const void* src, size_t bytes) { copy(2, dst, src, bytes); }

}  // namespace

std::unique_ptr<Device> make_sim_device(const DeviceOptions& options) {
  if (options.sim_link.h2d_gbps < 0 || options.sim_link.d2h_gbps < 0 || options.sim_link.latency_us < 0)
    fail(ErrorKind::invalid_arg, "sim device: negative link bandwidth or latency");
  return std::make_unique<SimDevice>(options);
}

}  // namespace ferry
