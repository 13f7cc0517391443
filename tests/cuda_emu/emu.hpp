#pragma once
// The CUDA emulator's device side (tests/cuda_emu/README.md): what a .cu file needs when g++
// compiles it for the host. The emulator build force-includes this header into every .cu file.
//
// Execution model: a launch is queued on its stream's worker thread like a real one; there the
// grid's blocks run one after another, and a block's threads run as fibers on that one OS thread
// (fiber.cpp), switching only at barriers (__syncthreads, __syncwarp, shuffles). So:
//  - __shared__ variables are `static thread_local`: one copy per worker thread, i.e. per running
//    block, shared by its fibers;
//  - a barrier that not every live thread of the block (or warp) reaches is reported as a
//    deadlock (a divergent __syncthreads) and fails the launch;
//  - pointer arguments of a kernel must point into device memory (cudaMalloc) or page-locked host
//    memory (cudaMallocHost, cudaHostRegister): anything else fails the launch as a GPU would.
#include <math.h>

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

namespace ferry_emu {

// The emulated thread being run (set by the block scheduler before each fiber switch).
struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned lane;  // thread index within its warp
};
extern thread_local const ThreadState* current;

void sync_block(const char* file, int line);  // __syncthreads at file:line
void sync_warp();                     // __syncwarp
unsigned char* warp_exchange_slots();  // this warp's 32 x 16-byte exchange slots
void* dynamic_shared();               // the block's dynamic shared memory

// Queues a kernel: `thread_body` runs once per thread of every block. `name_hint` is for errors.
// `kernel` identifies the function (graph updates require the same kernels in the same order).
void enqueue_kernel(cudaStream_t stream, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                    std::function<void()> thread_body);
// Validation of pointer arguments (see above); false and a message on stderr when p is not
// device-accessible. Null is allowed (optional arguments).
bool device_accessible(const void* p, int arg_index);
void set_launch_error(cudaError_t err);
// Inside a kernel: a pointer read from device memory (an expert pointer table) that does not point
// into device or page-locked memory fails the launch, as the illegal address would on a GPU.
void check_device_pointer(const void* p, const char* what);

template <typename T>
bool check_argument(const T& v, int index) {
  if constexpr (std::is_pointer_v<T>)
    return device_accessible(static_cast<const void*>(v), index);
  else
    return true;
}

template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  // Arguments are copied at launch, as CUDA does.
  auto params = std::make_shared<std::tuple<std::remove_cvref_t<P>...>>(
      static_cast<std::remove_cvref_t<P>>(std::forward<A>(args))...);
  bool ok = true;
  std::apply([&](const auto&... p) {
    int i = 0;
    ((ok = check_argument(p, i++) && ok), ...);
  }, *params);
  if (!ok) {
    set_launch_error(cudaErrorInvalidDevicePointer);
    return;
  }
  enqueue_kernel(stream, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
                 [kernel, params] { std::apply(kernel, *params); });
}

}  // namespace ferry_emu

#define threadIdx (::ferry_emu::current->thread_idx)
#define blockIdx (::ferry_emu::current->block_idx)
#define blockDim (::ferry_emu::current->block_dim)
#define gridDim (::ferry_emu::current->grid_dim)
constexpr int warpSize = 32;

// __syncthreads passes its source location: divergence is detected by comparing the barriers'
// source lines (fiber.cpp), which compiler code duplication (loop unswitching, peeling, tail
// merging) cannot change — return addresses could, and reported barriers of one source line as
// divergent.
#define __syncthreads() ::ferry_emu::sync_block(__FILE__, __LINE__)
#define __syncwarp(...) ::ferry_emu::sync_warp()

// Every lane of the warp exchanges through its slot; the two warp barriers make the exchange a
// collective and keep a later shuffle from overwriting a slot before it is read. Each lane reads
// the slot of src(lane) when it lies within the lane's group of `width` lanes, else keeps v.
namespace ferry_emu {
template <typename T, typename Src>
T warp_shuffle(T v, int width, Src src) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>);
  unsigned char* slots = ::ferry_emu::warp_exchange_slots();
  const unsigned lane = ::ferry_emu::current->lane;
  std::memcpy(slots + 16 * lane, &v, sizeof(T));
  ::ferry_emu::sync_warp();
  const unsigned from = src(lane);
  const unsigned group = lane & ~static_cast<unsigned>(width - 1);
  T r = v;
  if (from >= group && from < group + static_cast<unsigned>(width)) std::memcpy(&r, slots + 16 * from, sizeof(T));
  ::ferry_emu::sync_warp();
  return r;
}
}  // namespace ferry_emu

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  return ::ferry_emu::warp_shuffle(v, width, [lane_mask](unsigned lane) { return lane ^ static_cast<unsigned>(lane_mask); });
}

// Lane src_lane's v (of the lane's group of `width` lanes) to every lane.
template <typename T>
T __shfl_sync(unsigned, T v, int src_lane, int width = 32) {
  return ::ferry_emu::warp_shuffle(v, width, [src_lane, width](unsigned lane) {
    return (lane & ~static_cast<unsigned>(width - 1)) + (static_cast<unsigned>(src_lane) & static_cast<unsigned>(width - 1));
  });
}

// CUDA's global min/max overloads (integers and floats alike, in the common type).
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(b) < static_cast<T>(a) ? static_cast<T>(b) : static_cast<T>(a);
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(a) < static_cast<T>(b) ? static_cast<T>(b) : static_cast<T>(a);
}

// Round-to-nearest float arithmetic: the emulator build compiles with -ffp-contract=off, so these
// are plain operations.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = (uint64_t{y} << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
}

// Four-way byte dot product with accumulate, as the hardware computes it: the bytes of a and b
// sign-extended (int overload) or zero-extended (unsigned overload), their four products added to
// c, the sum wrapping modulo 2^32.
inline int __dp4a(int a, int b, int c) {
  int64_t acc = c;
  for (int k = 0; k < 4; ++k)
    acc += int64_t{static_cast<int8_t>(static_cast<unsigned>(a) >> (8 * k))} *
           int64_t{static_cast<int8_t>(static_cast<unsigned>(b) >> (8 * k))};
  return static_cast<int>(static_cast<uint32_t>(static_cast<uint64_t>(acc)));
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  uint64_t acc = c;
  for (int k = 0; k < 4; ++k) acc += uint64_t{(a >> (8 * k)) & 0xFF} * uint64_t{(b >> (8 * k)) & 0xFF};
  return static_cast<unsigned>(acc);
}

// Global-memory atomics and fences. Blocks of a launch run one after another on the stream's
// worker thread and fibers switch only at barriers, so within a launch these are trivially atomic;
// std::atomic_ref keeps them atomic against kernels of other streams (other worker threads).
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// A load that bypasses L1 on a GPU (reads what other blocks wrote before a fence); a load here.
template <typename T>
inline T __ldcg(const T* p) { return *p; }

#define FERRY_EMU_CHECK_DEVICE_POINTER(p, what) ::ferry_emu::check_device_pointer(p, what)

// `extern __shared__ T name[]` in CUDA; see kernels/cuda/launch.cuh.
#define FERRY_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::ferry_emu::dynamic_shared())
