// The CUDA emulator itself (built only with FERRY_CUDA=EMU): the behaviours the GPU tests rely on
// when they run on it — warp shuffles and block barriers, barrier divergence reported, pointer
// arguments and copy ranges checked, stream and event ordering, pageable-copy staging, capacity.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "ferry_emu_counters.h"
#include "tests/cuda_emu/emu.hpp"

namespace {

__global__ void warp_sums(const float* x, float* out) {
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

// Reverses each block's slice through shared memory: wrong without the barrier.
__global__ void reverse_block(const int* x, int* y) {
  __shared__ int tile[256];
  const unsigned i = threadIdx.x, base = blockIdx.x * blockDim.x;
  tile[i] = x[base + i];
  __syncthreads();
  y[base + i] = tile[blockDim.x - 1 - i];
}

__device__ __attribute__((noinline)) void barrier_elsewhere() { __syncthreads(); }

// Half the block waits at one __syncthreads, half at another.
__global__ void divergent_barrier(int* y) {
  if (threadIdx.x < 16)
    barrier_elsewhere();
  else
    __syncthreads();
  y[threadIdx.x] = 1;
}

// Half of warp 0 waits in a shuffle, half at __syncthreads: neither can complete.
__global__ void stuck_barrier(float* y) {
  float v = 1.f;
  if (threadIdx.x < 16)
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  else
    __syncthreads();
  y[threadIdx.x] = v;
}

// Reads through a pointer table in device memory (as the MoE kernels read expert pointers).
__global__ void read_table(const float* const* table, float* y) {
  FERRY_EMU_CHECK_DEVICE_POINTER(table[threadIdx.x], "table entry");
  y[threadIdx.x] = *table[threadIdx.x];
}

// Threads past n end before the barrier (the `if (i >= n) return;` idiom).
__global__ void early_exit_then_barrier(int* y, int n) {
  if (static_cast<int>(threadIdx.x) >= n) return;
  __syncthreads();
  y[threadIdx.x] = 2;
}

__global__ void fill(int* y, int v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}

// out_s[i] = __dp4a(a[i], b[i], c[i]) (signed bytes), out_u[i] the unsigned overload.
__global__ void dp4a_cases(const int* a, const int* b, const int* c, int* out_s, unsigned* out_u) {
  const unsigned i = threadIdx.x;
  out_s[i] = __dp4a(a[i], b[i], c[i]);
  out_u[i] = __dp4a(static_cast<unsigned>(a[i]), static_cast<unsigned>(b[i]), static_cast<unsigned>(c[i]));
}

template <typename T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

TEST(CudaEmulator, ShufflesAndBarriers) {
  std::vector<float> x(256);
  std::iota(x.begin(), x.end(), 1.f);
  float* dx = dev_alloc<float>(256);
  float* dout = dev_alloc<float>(8);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), 256 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ferry_emu::launch(warp_sums, dim3(2), dim3(128), 0, nullptr, dx, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out(8);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, 8 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int w = 0; w < 8; ++w) EXPECT_EQ(out[w], 32.f * (32 * w + 1) + 31 * 32 / 2.f) << "warp " << w;

  std::vector<int> xi(512);
  std::iota(xi.begin(), xi.end(), 0);
  int* di = dev_alloc<int>(512);
  int* dy = dev_alloc<int>(512);
  ASSERT_EQ(cudaMemcpy(di, xi.data(), 512 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  ferry_emu::launch(reverse_block, dim3(2), dim3(256), 0, nullptr, di, dy);
  std::vector<int> yi(512);
  ASSERT_EQ(cudaMemcpy(yi.data(), dy, 512 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 512; ++i) EXPECT_EQ(yi[i], (i / 256) * 256 + 255 - i % 256) << i;
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dout), static_cast<void*>(di), static_cast<void*>(dy)})
    cudaFree(p);
}

TEST(CudaEmulator, ChecksArgumentsAndRanges) {
  int* d = dev_alloc<int>(64);
  std::vector<int> host(64);
  ferry_emu::launch(fill, dim3(1), dim3(64), 0, nullptr, host.data(), 7, 64);  // a host pointer
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevicePointer);
  EXPECT_EQ(host[0], 0);  // not run
  ferry_emu::launch(fill, dim3(1), dim3(2048), 0, nullptr, d, 7, 64);  // too many threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaMemcpy(d, host.data(), 65 * sizeof(int), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), d + 1, 64 * sizeof(int), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // Page-locked host memory is device-accessible, as on a GPU with unified addressing.
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64 * sizeof(int)), cudaSuccess);
  ferry_emu::launch(fill, dim3(1), dim3(64), 0, nullptr, static_cast<int*>(pinned), 5, 64);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(static_cast<int*>(pinned)[63], 5);
  cudaFreeHost(pinned);
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  void* big = nullptr;
  EXPECT_EQ(cudaMalloc(&big, free_b + 1), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  cudaFree(d);
}

TEST(CudaEmulator, StreamsEventsAndStaging) {
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  constexpr int n = 1 << 16;
  int* a = dev_alloc<int>(n);
  int* b = dev_alloc<int>(n);
  // s2 copies a to b only after s1's kernel filled a.
  ferry_emu::launch(fill, dim3(n / 256), dim3(256), 0, s1, a, 3, n);
  ASSERT_EQ(cudaEventRecord(done, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, done, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, s2), cudaSuccess);
  // A pageable source is staged at the call: changing it afterwards does not change the copy.
  std::vector<int> src(n, 9);
  ASSERT_EQ(cudaMemcpyAsync(a, src.data(), n * sizeof(int), cudaMemcpyHostToDevice, s2), cudaSuccess);
  src.assign(n, -1);
  std::vector<int> hb(n), ha(n);
  ASSERT_EQ(cudaMemcpyAsync(hb.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost, s2), cudaSuccess);  // pageable: sync
  ASSERT_EQ(cudaMemcpyAsync(ha.data(), a, n * sizeof(int), cudaMemcpyDeviceToHost, s2), cudaSuccess);
  EXPECT_EQ(hb[0], 3);
  EXPECT_EQ(hb[n - 1], 3);
  EXPECT_EQ(ha[n - 1], 9);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  // A host function runs in stream order.
  int seen = 0;
  ASSERT_EQ(cudaLaunchHostFunc(s1, [](void* p) { *static_cast<int*>(p) = 42; }, &seen), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(seen, 42);
  cudaEventDestroy(done);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaFree(a);
  cudaFree(b);
}

TEST(CudaEmulator, GraphsCaptureUpdateAndRefuseSyncs) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int* d = dev_alloc<int>(64);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64 * sizeof(int)), cudaSuccess);
  auto* h = static_cast<int*>(pinned);
  auto capture = [&](int v) {
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ferry_emu::launch(fill, dim3(1), dim3(64), 0, s, d, v, 64);
    EXPECT_EQ(cudaMemcpyAsync(h, d, 64 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    return g;
  };
  h[0] = -1;
  cudaGraph_t g1 = capture(4);
  EXPECT_EQ(h[0], -1);  // captured, not run
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g1, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(h[63], 4);
  cudaGraph_t g2 = capture(6);  // same topology, new argument
  cudaGraphExecUpdateResultInfo info{};
  ASSERT_EQ(cudaGraphExecUpdate(exec, g2, &info), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(h[63], 6);
  // Another topology is refused by the update.
  cudaGraph_t g3 = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ferry_emu::launch(fill, dim3(1), dim3(64), 0, s, d, 1, 64);
  ASSERT_EQ(cudaStreamEndCapture(s, &g3), cudaSuccess);
  EXPECT_EQ(cudaGraphExecUpdate(exec, g3, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorTopologyChanged);
  (void)cudaGetLastError();
  // A sync, an allocation or a pageable copy inside a capture invalidates it.
  std::vector<int> pageable(64);
  for (int what = 0; what < 3; ++what) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    void* p = nullptr;
    const cudaError_t e = what == 0   ? cudaStreamSynchronize(s)
                          : what == 1 ? cudaMalloc(&p, 16)
                                      : cudaMemcpyAsync(d, pageable.data(), 64 * sizeof(int), cudaMemcpyHostToDevice, s);
    EXPECT_NE(e, cudaSuccess) << what;
    cudaGraph_t bad = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &bad), cudaErrorStreamCaptureInvalidated) << what;
    EXPECT_EQ(bad, nullptr);
    (void)cudaGetLastError();
  }
  for (cudaGraph_t g : {g1, g2, g3}) cudaGraphDestroy(g);
  cudaGraphExecDestroy(exec);
  cudaFreeHost(pinned);
  cudaFree(d);
  cudaStreamDestroy(s);
}

// Last: the fault is sticky, as on a GPU, until cudaDeviceReset.
// Kernels, copies and memsets are counted when they run: eager ones once, a graph's nodes once per
// graph launch, a capture alone not at all (ferry bench's launches per token rests on this).
TEST(CudaEmulator, CountsKernelsRunEagerAndInGraphs) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int* d = dev_alloc<int>(64);
  const ferry_emu::ApiCounts a = ferry_emu::api_counts();
  ferry_emu::launch(fill, dim3(2), dim3(32), 0, s, d, 1, 64);  // one kernel, two blocks
  ASSERT_EQ(cudaMemsetAsync(d, 0, 64 * sizeof(int), s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const ferry_emu::ApiCounts b = ferry_emu::api_counts();
  EXPECT_EQ(b.kernels - a.kernels, 1u);
  EXPECT_EQ(b.memsets - a.memsets, 1u);
  EXPECT_EQ(b.copies - a.copies, 0u);

  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ferry_emu::launch(fill, dim3(1), dim3(64), 0, s, d, 2, 64);
  ASSERT_EQ(cudaMemcpyAsync(d, d + 32, 32 * sizeof(int), cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ferry_emu::launch(fill, dim3(1), dim3(64), 0, s, d, 3, 64);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  const ferry_emu::ApiCounts c = ferry_emu::api_counts();
  EXPECT_EQ(c.kernels, b.kernels) << "a capture runs nothing";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const ferry_emu::ApiCounts e = ferry_emu::api_counts();
  EXPECT_EQ(e.kernels - c.kernels, 6u) << "two kernel nodes, three launches";
  EXPECT_EQ(e.copies - c.copies, 3u);
  EXPECT_EQ(e.graph_launches - c.graph_launches, 3u);
  cudaGraphDestroy(g);
  cudaGraphExecDestroy(exec);
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST(CudaEmulator, DivergentBarrierFailsTheLaunch) {
  int* d = dev_alloc<int>(32);
  ferry_emu::launch(divergent_barrier, dim3(1), dim3(32), 0, nullptr, d);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float* f = dev_alloc<float>(32);
  ferry_emu::launch(stuck_barrier, dim3(1), dim3(32), 0, nullptr, f);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  // A table entry pointing at pageable host memory: an illegal address on a GPU.
  float* dev_value = dev_alloc<float>(1);
  std::vector<float> host_value(1, 3.f);
  const float* entries[2] = {dev_value, host_value.data()};
  auto** table = dev_alloc<const float*>(2);
  ASSERT_EQ(cudaMemcpy(table, entries, sizeof entries, cudaMemcpyHostToDevice), cudaSuccess);
  ferry_emu::launch(read_table, dim3(1), dim3(2), 0, nullptr, table, f);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  cudaFree(dev_value);
  cudaFree(table);
  // Threads that ended do not hold back a barrier.
  ferry_emu::launch(early_exit_then_barrier, dim3(1), dim3(64), 0, nullptr, d, 32);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int last = 0;
  ASSERT_EQ(cudaMemcpy(&last, d + 31, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(last, 2);
  cudaFree(d);
  cudaFree(f);
}

// Expected values worked out by hand from the bytes (least significant first), not with the
// emulator's own formula.
TEST(CudaEmulator, Dp4aIsExact) {
  // a bytes 127, 1, 0xFF, 0x80; b bytes 2, 0xFF, 0x80, 127.
  const std::vector<int> a = {static_cast<int>(0x80FF017Fu), static_cast<int>(0x80808080u), -1, 0x01020304};
  const std::vector<int> b = {static_cast<int>(0x7F80FF02u), static_cast<int>(0x80808080u), -1, 0x05060708};
  const std::vector<int> c = {1000, 0x7FFFFFFF, -1, -70};
  // signed: 127·2 + 1·(−1) + (−1)(−128) + (−128)·127 + 1000 = −14875;
  //         4·(−128)² + (2^31 − 1) wraps to −2^31 + 65535; 4·(−1)(−1) − 1 = 3; 4·8 + 3·7 + 2·6 + 5 − 70 = 0.
  // unsigned: 127·2 + 1·255 + 255·128 + 128·127 + 1000 = 50405; 4·128² + 0x7FFFFFFF = 0x8000FFFF;
  //           4·255² + 0xFFFFFFFF wraps to 260099; 70 − 70 = 0.
  const std::vector<int> want_s = {-14875, -2147418113, 3, 0};
  const std::vector<unsigned> want_u = {50405u, 0x8000FFFFu, 260099u, 0u};
  int* da = dev_alloc<int>(4);
  int* db = dev_alloc<int>(4);
  int* dc = dev_alloc<int>(4);
  int* ds = dev_alloc<int>(4);
  auto* du = dev_alloc<unsigned>(4);
  ASSERT_EQ(cudaMemcpy(da, a.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  ferry_emu::launch(dp4a_cases, dim3(1), dim3(4), 0, nullptr, da, db, dc, ds, du);
  std::vector<int> got_s(4);
  std::vector<unsigned> got_u(4);
  ASSERT_EQ(cudaMemcpy(got_s.data(), ds, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got_u.data(), du, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got_s, want_s);
  EXPECT_EQ(got_u, want_u);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(ds),
                  static_cast<void*>(du)})
    cudaFree(p);
}

}  // namespace
