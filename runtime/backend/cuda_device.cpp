#include "runtime/backend/cuda_device.hpp"

#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <utility>

#include "kernels/cuda/check.cuh"
#include "runtime/core/log.hpp"

namespace ferry {
namespace {

class CudaEvent final : public Event {
 public:
  CudaEvent() { FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDefault)); }
  ~CudaEvent() override { (void)cudaEventDestroy(e_); }
  bool query() override {
    const cudaError_t st = cudaEventQuery(e_);
    if (st == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    FERRY_CUDA_CHECK(st);
    return true;
  }
  void synchronize() override { FERRY_CUDA_CHECK(cudaEventSynchronize(e_)); }
  double elapsed_ms_since(const Event& start) const override {
    const auto* s = dynamic_cast<const CudaEvent*>(&start);
    if (!s) fail(ErrorKind::invalid_arg, "cuda event: elapsed time against an event of another device");
    float ms = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, s->e_, e_));
    return ms;
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Shared with in-flight host functions, which may outlive a synchronize() call but not the
// stream (cudaStreamDestroy waits for them).
struct HostFnState {
  std::mutex mu;
  std::exception_ptr error;
};

struct HostFnCall {
  std::function<void()> fn;
  HostFnState* state;
};

void CUDART_CB run_host_fn(void* data) {
  std::unique_ptr<HostFnCall> call(static_cast<HostFnCall*>(data));
  try {
    call->fn();
  } catch (...) {
    std::lock_guard lock(call->state->mu);
    if (!call->state->error) call->state->error = std::current_exception();
  }
}

class CudaDevice;

class CudaStream final : public Stream {
 public:
  explicit CudaStream(CudaDevice& dev);
  // A view of a stream made elsewhere (a CudaOps's): not destroyed here.
  CudaStream(CudaDevice& dev, cudaStream_t s) : dev_(dev), s_(s), owned_(false) {}
  ~CudaStream() override {
    (void)cudaStreamSynchronize(s_);
    if (owned_) (void)cudaStreamDestroy(s_);
  }
  void copy_h2d(void* dst, const void* src, size_t bytes) override;
  void copy_d2h(void* dst, const void* src, size_t bytes) override;
  void copy_d2d(void* dst, const void* src, size_t bytes) override;
  void memset(void* dst, int value, size_t bytes) override {
    FERRY_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, s_));
  }
  void host_fn(std::function<void()> fn) override {
    auto call = std::make_unique<HostFnCall>(HostFnCall{std::move(fn), &state_});
    FERRY_CUDA_CHECK(cudaLaunchHostFunc(s_, run_host_fn, call.get()));
    call.release();  // owned by run_host_fn now
  }
  void record(Event& e) override {
    auto* ev = dynamic_cast<CudaEvent*>(&e);
    if (!ev) fail(ErrorKind::invalid_arg, "cuda stream: record of an event of another device");
    FERRY_CUDA_CHECK(cudaEventRecord(ev->get(), s_));
  }
  void wait(const Event& e) override {
    const auto* ev = dynamic_cast<const CudaEvent*>(&e);
    if (!ev) fail(ErrorKind::invalid_arg, "cuda stream: wait on an event of another device");
    FERRY_CUDA_CHECK(cudaStreamWaitEvent(s_, ev->get(), 0));
  }
  void synchronize() override {
    FERRY_CUDA_CHECK(cudaStreamSynchronize(s_));
    std::lock_guard lock(state_.mu);
    if (auto e = std::exchange(state_.error, nullptr)) std::rethrow_exception(e);
  }
  void* native_handle() override { return s_; }

 private:
  void copy(int dir, void* dst, const void* src, size_t bytes);
  CudaDevice& dev_;
  cudaStream_t s_ = nullptr;
  bool owned_ = true;
  HostFnState state_;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int id, uint64_t budget, std::string name) : Device("cuda device " + std::to_string(id), budget), id_(id), name_(std::move(name)) {}

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(*this); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }

  HostBuffer alloc_host(size_t bytes, bool pinned) override {
    const size_t n = bytes == 0 ? 256 : bytes;
    if (pinned) {
      void* p = nullptr;
      const cudaError_t st = cudaMallocHost(&p, n);
      if (st == cudaSuccess) return HostBuffer(p, bytes, true, [](void* q) { (void)cudaFreeHost(q); });
      (void)cudaGetLastError();
      log::warn("cuda: pinning {} of host memory failed ({}); using pageable memory (slower copies)",
                format_size(bytes), cudaGetErrorString(st));
    }
    void* p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    if (!p) fail(ErrorKind::budget, "cuda device: host allocation of {} failed", format_size(bytes));
    return HostBuffer(p, bytes, false, [](void* q) { std::free(q); });
  }

  HostRegistration register_host(void* p, size_t bytes) override {
    // Mapped (kernels may read it in place); read-only where the device supports it, which a
    // PROT_READ file mapping needs.
    int ro = 0;
    (void)cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, id_);
    const cudaError_t st = cudaHostRegister(p, bytes, cudaHostRegisterMapped | (ro ? cudaHostRegisterReadOnly : 0u));
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      log::warn("cuda: cudaHostRegister of {} failed ({}); copies from it will be pageable (slower)",
                format_size(bytes), cudaGetErrorString(st));
      return HostRegistration(p, false, nullptr);
    }
    return HostRegistration(p, true, [](void* q) { (void)cudaHostUnregister(q); });
  }

  const void* mapped_view(const void* host) override {
    void* d = nullptr;
    const cudaError_t st = cudaHostGetDevicePointer(&d, const_cast<void*>(host), 0);
    if (st != cudaSuccess) {
      (void)cudaGetLastError();  // pageable, or not mapped: not an error for the caller
      return nullptr;
    }
    return d;
  }

  void synchronize() override { FERRY_CUDA_CHECK(cudaDeviceSynchronize()); }
  void note_copy(int dir, size_t bytes) { count_copy(dir, bytes); }

 protected:
  void* raw_alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t st = cudaMalloc(&p, bytes);
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      fail(st == cudaErrorMemoryAllocation ? ErrorKind::budget : ErrorKind::device,
           "cuda device {}: cudaMalloc of {} failed ({}); {} free of {} on the card, budget use {}",
           id_, format_size(bytes), cudaGetErrorString(st), format_size(free_b), format_size(total_b),
           format_size(budget_.stats().used_bytes));
    }
    return p;
  }
  void raw_free(void* p) noexcept override {
    const cudaError_t st = cudaFree(p);
    if (st != cudaSuccess) log::warn("cuda: cudaFree failed: {}", cudaGetErrorString(st));
  }

 private:
  int id_;
  std::string name_;
};

CudaStream::CudaStream(CudaDevice& dev) : dev_(dev) {
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}

void CudaStream::copy(int dir, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  static constexpr cudaMemcpyKind kKinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
  FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kKinds[dir], s_));
  dev_.note_copy(dir, bytes);
}

void CudaStream::copy_h2d(void* dst, const void* src, size_t bytes) { copy(0, dst, src, bytes); }
void CudaStream::copy_d2h(void* dst, const void* src, size_t bytes) { copy(1, dst, src, bytes); }
void CudaStream::copy_d2d(void* dst, const void* src, size_t bytes) { copy(2, dst, src, bytes); }

}  // namespace

int cuda_device_count() { return cuda::device_count(); }

std::unique_ptr<Device> make_cuda_device(const DeviceOptions& options) {
  const int n = cuda_device_count();
  if (n == 0) fail(ErrorKind::device, "no CUDA device (no GPU or no driver); use --device cpu or sim");
  if (options.cuda_device < 0 || options.cuda_device >= n)
    fail(ErrorKind::invalid_arg, "CUDA device {} does not exist ({} present)", options.cuda_device, n);
  FERRY_CUDA_CHECK(cudaSetDevice(options.cuda_device));
  cudaDeviceProp prop{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.cuda_device));
  size_t free_b = 0, total_b = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  uint64_t budget = options.budget_bytes;
  if (budget == 0) budget = free_b;
  if (budget > free_b)
    log::warn("cuda: budget {} exceeds the {} free on {}; allocations may fail before the budget is reached",
              format_size(budget), format_size(free_b), prop.name);
  return std::make_unique<CudaDevice>(options.cuda_device, budget,
                                      std::string(prop.name) + " (cuda:" + std::to_string(options.cuda_device) + ")");
}

std::unique_ptr<Stream> cuda_stream_view(Device& dev, void* stream) {
  auto* d = dynamic_cast<CudaDevice*>(&dev);
  if (!d) fail(ErrorKind::invalid_arg, "cuda_stream_view on a {} device", device_kind_name(dev.kind()));
  return std::make_unique<CudaStream>(*d, static_cast<cudaStream_t>(stream));
}

CudaMemInfo cuda_mem_info() {
  size_t free_b = 0, total_b = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {free_b, total_b};
}

}  // namespace ferry

#else  // built without CUDA

namespace ferry {

int cuda_device_count() { return 0; }

std::unique_ptr<Device> make_cuda_device(const DeviceOptions&) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}

std::unique_ptr<Stream> cuda_stream_view(Device&, void*) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA");
}

CudaMemInfo cuda_mem_info() {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA");
}

}  // namespace ferry

#endif
