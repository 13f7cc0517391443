#include "runtime/backend/device.hpp"

#include <cstdlib>
#include <string>

#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/sim_device.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::sim: return "sim";
    case DeviceKind::cuda: return "cuda";
  }
  return "?";
}

DeviceKind parse_device_kind(std::string_view s) {
  if (s == "cuda") return DeviceKind::cuda;
  if (s == "cpu") return DeviceKind::cpu;
  if (s == "sim") return DeviceKind::sim;
  if (s == "auto" || s.empty()) return default_device_kind();
  fail(ErrorKind::invalid_arg, "unknown device '{}' (expected cuda, cpu, sim or auto)", s);
}

bool cuda_available() { return cuda_device_count() > 0; }

DeviceKind default_device_kind() {
#if defined(FERRY_CUDA_EMU)
  // The CUDA emulator (tests/cuda_emu) is not a GPU: `auto` stays on the CPU, so the CLI and server
  // tests of an emulator build run where they run on a machine without a GPU, unless the run names
  // the emulated card's memory (FERRY_CUDA_EMU_MEMORY), as the zero-flag fitting tests do.
  if (!std::getenv("FERRY_CUDA_EMU_MEMORY")) return DeviceKind::cpu;
#endif
  return cuda_available() ? DeviceKind::cuda : DeviceKind::cpu;
}

DeviceBuffer Device::alloc(size_t bytes, std::string_view tag) {
  const uint64_t charged = (static_cast<uint64_t>(bytes) + 255) / 256 * 256;
  budget_.charge(charged, tag);
  void* p = nullptr;
  try {
    p = raw_alloc(charged == 0 ? 256 : charged);
  } catch (...) {
    budget_.release(charged);
    throw;
  }
  return DeviceBuffer(p, bytes, [this, charged](void* q) {
    raw_free(q);
    budget_.release(charged);
  });
}

CopyStats Device::copies() const {
  CopyStats s;
  s.h2d_bytes = copy_bytes_[0].load();
  s.d2h_bytes = copy_bytes_[1].load();
  s.d2d_bytes = copy_bytes_[2].load();
  s.h2d_copies = copy_count_[0].load();
  s.d2h_copies = copy_count_[1].load();
  s.d2d_copies = copy_count_[2].load();
  return s;
}

void Device::count_copy(int direction, size_t bytes) {
  copy_bytes_[direction] += bytes;
  copy_count_[direction] += 1;
}

std::unique_ptr<Device> make_device(DeviceKind kind, const DeviceOptions& options) {
  switch (kind) {
    case DeviceKind::sim: return make_sim_device(options);
    case DeviceKind::cuda: return make_cuda_device(options);
    case DeviceKind::cpu:
      fail(ErrorKind::invalid_arg, "the cpu backend has no Device (it computes on host memory)");
  }
  fail(ErrorKind::internal, "unknown DeviceKind");
}

}  // namespace ferry
