#include "runtime/core/host_memory.hpp"

#include <fstream>
#include <string>

namespace ferry {

uint64_t host_mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::optional<uint64_t> host_mem_usable() {
  const uint64_t avail = host_mem_available();
  if (avail == 0) return std::nullopt;
  return avail > kHostMemReserveBytes ? avail - kHostMemReserveBytes : 0;
}

}  // namespace ferry
