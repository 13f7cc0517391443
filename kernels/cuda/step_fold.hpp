#pragma once
// A step graph's fingerprint, folded by launch() (launch.cuh) and by the CUDA Ops' copies
// (runtime/backend/cuda_ops.cpp). Plain C++: the Ops (host code) include it.
//
// runtime/backend/cuda_ops.cpp replays a recorded one-token step graph only when the step, run
// again on the host, makes the same calls: while a thread has a StepFold, each of its launch()
// calls folds the kernel, its grid, block, shared bytes, stream and the bytes of every argument
// (converted to the kernel's parameter type, as the launch passes it) into `hash`, counts itself
// in `kernels`, and is launched only when `launch` is set (recording); a replay only folds.
// FNV-1a over 8-byte words (then the tail bytes), 64 bits. Arguments whose bytes differ (a position, a pointer, struct padding) give
// another fingerprint, so a replay can only miss, never run a graph of other calls.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::cuda::detail {

struct StepFold {
  uint64_t hash = 14695981039346656037ull;
  uint64_t kernels = 0, copies = 0;  // copies: the memcpy/memset nodes the Ops folded
  bool launch = true;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, 8);
      hash = (hash ^ w) * 1099511628211ull;
    }
    for (; i < n; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
  }
  template <typename T>
  void value(const T& v) {
    bytes(&v, sizeof(T));
  }
};

// The calling thread's fold, or nullptr (defined in launch_count.cpp).
extern thread_local StepFold* step_fold;

template <typename P, typename A>
void fold_argument(StepFold& f, const A& a) {
  const P p = a;
  f.value(p);
}

}  // namespace ferry::cuda::detail
