#pragma once
// A thread pool for cpp-httplib that grows instead of queueing. httplib hands a whole connection
// (keep-alive included) to one task, so a fixed pool of N threads makes the (N+1)-th connection
// wait — a /health probe behind N streams. This pool keeps `base` threads and starts more, up to
// `max`, when every thread is busy; the extra ones exit after ten idle minutes. Only past `max`
// connections do tasks queue.
#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::server {

class GrowingTaskPool : public httplib::TaskQueue {
 public:
  GrowingTaskPool(size_t base, size_t max);
  ~GrowingTaskPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;  // runs what is queued, then joins every thread

 private:
  void worker(bool extra);
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable extra_done_;  // shutdown waits for the detached extra threads
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;  // the base threads (extra ones are detached)
  size_t base_, max_, idle_ = 0, alive_ = 0, extra_alive_ = 0;
  bool shutdown_ = false;
};

}  // namespace ferry::server
