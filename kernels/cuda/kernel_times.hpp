#pragma once
// Per-kernel GPU time, opt-in (`ferry bench --kernel-times`, `bench_gpu_e2e --kernel-times`): while
// on, every launch() (launch.cuh) records a CUDA event on its stream before
// and after the kernel, from a pool (no allocation per launch once warm). Nothing is synchronised
// per launch: take_kernel_times() waits for the last event of each stream, then reads the pairs.
//  - An event pair brackets one kernel on its stream, so a kernel's time is its own execution plus
//    the gap between its two records (its own launch latency when the GPU got ahead of the host);
//    the time the GPU idles between kernels (host work, launch overhead) is in no kernel's time:
//    wall time minus the sum is that gap.
//  - Eager launches only: a launch on a stream being captured into a CUDA graph is not timed (it
//    is counted as untimed), so time with --cuda-graphs off (ferry bench forces it).
//  - On the CUDA emulator (tests/cuda_emu) the times are the host's time to run the kernel on the
//    CPU, not GPU timings; names and launch counts are the same as on a GPU.
//  - cuBLAS GEMMs (blas.hpp, prefill only) do not go through launch(): Blas times each call the
//    same way, under the name "cublasGemmEx" (one call may run more than one kernel).
// Plain C++: host code that cannot include launch.cuh reads it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::cuda {

struct KernelTime {
  std::string name;  // demangled, namespaces and the parameter list dropped (kernel_name.hpp)
  uint64_t launches = 0;
  double total_us = 0;  // summed over the launches
};

struct KernelTimes {
  std::vector<KernelTime> kernels;  // by total_us, largest first (ties by name)
  // Launches made while their stream was being captured, and launches another host thread was
  // still making when the take came.
  uint64_t untimed_launches = 0;
  bool emulated = false;  // the CUDA emulator: times are CPU times, not GPU timings
};

// The process-wide switch, off at start.
void set_kernel_times(bool on);
bool kernel_times_enabled();

// Waits for the recorded launches and returns their times since the previous take, summed per
// kernel name; the records are cleared and their events return to the pool. Must not run while a
// stream is being captured.
KernelTimes take_kernel_times();

// Events the timer has created in this process (the pool's size): 0 while it was never on.
uint64_t kernel_timer_events_created();

namespace detail {
extern std::atomic<bool> kernel_times_on;
constexpr size_t kUntimed = ~size_t{0};
// Around one launch on `stream` (a cudaStream_t): begin returns the record's slot, kUntimed when
// the stream is capturing; end records the closing event of that slot.
size_t time_launch_begin(const void* kernel, void* stream);
// The same for work that is not a kernel function of ours (a cuBLAS call): `name` (a string
// literal, its address the key) is its row's name.
size_t time_named_begin(const char* name, void* stream);
void time_launch_end(size_t slot, void* stream);
}  // namespace detail

}  // namespace ferry::cuda
