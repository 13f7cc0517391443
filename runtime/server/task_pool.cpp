#include "runtime/server/task_pool.hpp"

#include <chrono>

namespace ferry::server {

// An extra thread lives this long without work: long enough that bursts minutes apart reuse the
// same threads (and their allocator pages) instead of making new ones.
constexpr auto kExtraIdle = std::chrono::minutes(10);

GrowingTaskPool::GrowingTaskPool(size_t base, size_t max) : base_(base), max_(std::max(base, max)) {
  std::lock_guard lk(mu_);
  for (size_t i = 0; i < base_; ++i) {
    ++alive_;
    threads_.emplace_back([this] { worker(false); });
  }
}

GrowingTaskPool::~GrowingTaskPool() {
  shutdown();
}

void GrowingTaskPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(fn));
    // Every thread busy (the queued jobs need more than the idle ones): grow.
    if (jobs_.size() > idle_ && alive_ < max_) {
      ++alive_;
      ++extra_alive_;
      std::thread([this] { worker(true); }).detach();
    }
  }
  cv_.notify_one();
}

void GrowingTaskPool::shutdown() {
  std::vector<std::thread> ts;
  {
    std::lock_guard lk(mu_);
    shutdown_ = true;
    ts.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : ts)
    if (t.joinable()) t.join();
  std::unique_lock lk(mu_);
  extra_done_.wait(lk, [&] { return extra_alive_ == 0; });
}

void GrowingTaskPool::worker(bool extra) {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(mu_);
      ++idle_;
      const auto ready = [&] { return shutdown_ || !jobs_.empty(); };
      if (extra) {
        if (!cv_.wait_for(lk, kExtraIdle, ready)) {
          --idle_;
          --alive_;
          --extra_alive_;
          extra_done_.notify_all();  // under the lock: shutdown cannot return before we let go
          return;
        }
      } else {
        cv_.wait(lk, ready);
      }
      --idle_;
      if (jobs_.empty()) {  // shutdown and nothing left
        --alive_;
        if (extra) {
          --extra_alive_;
          extra_done_.notify_all();
        }
        return;
      }
      fn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    fn();
  }
}

}  // namespace ferry::server
