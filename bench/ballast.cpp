// bench_ballast --leave SIZE [--ready FILE]: makes a large card look like a small one. Holds all
// free device memory but SIZE (e.g. 16G, 12G, 900M) with cudaMalloc until it is killed, so that
// every engine started after it (Ferry, llama.cpp's --fit) sees the same free memory, as on a
// card of that size. Prints what it holds and what it left as one line, then writes the same line
// to FILE (bench/sidebyside.py waits for the file before it starts an engine).
//
// Why a separate process rather than a budget flag: llama.cpp's fit reads cudaMemGetInfo, which
// only another process's allocations change; Ferry's --vram alone would leave llama.cpp the whole
// card (docs: bench/README.md, the side-by-side).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "runtime/backend/device_size.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <unistd.h>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr double kMiB = 1024.0 * 1024.0;

int run(uint64_t leave_bytes, const char* ready_file) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes); e != cudaSuccess) {
    std::fprintf(stderr, "bench_ballast: cudaMemGetInfo: %s\n", cudaGetErrorString(e));
    return 1;
  }
  if (free_bytes <= leave_bytes) {
    std::fprintf(stderr, "bench_ballast: only %.0f MiB free, less than the %.0f MiB to leave\n",
                 free_bytes / kMiB, leave_bytes / kMiB);
    return 1;
  }
  // Large chunks first, then halving: the allocator rounds each chunk up (2 MiB pages on a GPU),
  // so the free memory is re-read after each step rather than computed.
  std::vector<void*> held;
  uint64_t held_bytes = 0;
  size_t chunk = size_t{1} << 30;
  while (chunk >= (size_t{1} << 20)) {
    cudaMemGetInfo(&free_bytes, &total_bytes);
    if (free_bytes < leave_bytes + chunk) {
      chunk /= 2;
      continue;
    }
    void* p = nullptr;
    if (cudaMalloc(&p, chunk) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error and try a smaller chunk
      chunk /= 2;
      continue;
    }
    held.push_back(p);
    held_bytes += chunk;
  }
  cudaMemGetInfo(&free_bytes, &total_bytes);
  char line[256];
  std::snprintf(line, sizeof line, "ballast: holds %.0f MiB, left free %.0f MiB of %.0f MiB (asked to leave %.0f MiB)\n",
                held_bytes / kMiB, free_bytes / kMiB, total_bytes / kMiB, leave_bytes / kMiB);
  std::fputs(line, stdout);
  std::fflush(stdout);
  if (ready_file) {
    FILE* f = std::fopen(ready_file, "w");
    if (!f) {
      std::fprintf(stderr, "bench_ballast: cannot write %s: %s\n", ready_file, std::strerror(errno));
      return 1;
    }
    std::fputs(line, f);
    std::fclose(f);
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  while (!g_stop) pause();
  for (void* p : held) cudaFree(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* leave = nullptr;
  const char* ready = nullptr;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--leave") == 0) leave = argv[i + 1];
    else if (std::strcmp(argv[i], "--ready") == 0) ready = argv[i + 1];
  }
  if (!leave || argc % 2 == 0) {
    std::fprintf(stderr, "usage: bench_ballast --leave SIZE [--ready FILE]   (SIZE: 16G, 12G, 900M, ...)\n");
    return 2;
  }
  try {
    return run(ferry::parse_size(leave), ready);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ballast: %s\n", e.what());
    return 2;
  }
}

#else
int main() {
  std::fprintf(stderr, "bench_ballast: built without CUDA; nothing to hold\n");
  return 1;
}
#endif
