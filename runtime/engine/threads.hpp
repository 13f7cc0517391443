#pragma once
// Thread count of the process's oneTBB work (-t): a tbb::global_control held for the lifetime of
// a ThreadLimit. Default: physical cores, as llama.cpp's -t default.
#include <memory>

#include <tbb/global_control.h>

namespace ferry {

int physical_cores();  // distinct (package, core) pairs in sysfs; hardware threads as fallback

class ThreadLimit {
 public:
  explicit ThreadLimit(int n_threads);  // n <= 0: physical_cores()
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;
  int threads() const { return n_; }

 private:
  int n_;
  std::unique_ptr<tbb::global_control> gc_;
};

}  // namespace ferry
