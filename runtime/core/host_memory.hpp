#pragma once
// How much host RAM Ferry may take: read from /proc/meminfo, for the engine (the CPU backend's
// repacked copies, a session's state on the host) and the offload engine (its pinned expert store).
#include <cstdint>
#include <optional>

namespace ferry {

// What is left for the OS and the rest of the process when Ferry sizes its own allocations.
inline constexpr uint64_t kHostMemReserveBytes = 1ull << 30;

// MemAvailable from /proc/meminfo in bytes (0 when it cannot be read).
uint64_t host_mem_available();
// What Ferry may take of it: MemAvailable minus kHostMemReserveBytes; nullopt when MemAvailable
// cannot be read.
std::optional<uint64_t> host_mem_usable();

}  // namespace ferry
