#pragma once
// Shared between the emulator's runtime (runtime.cpp) and its block scheduler (fiber.cpp).
#include <functional>
#include <string>
#include <vector>

#include "cuda_runtime_api.h"

namespace ferry_emu {

struct LaunchShape {
  dim3 grid, block;
  size_t shared_bytes = 0;
};

// Runs one block of `shape` to completion on the calling thread; throws std::runtime_error on a
// barrier deadlock. `shared` is the block's dynamic shared memory.
// FERRY_CUDA_EMU_ORDER=reverse: blocks and threads run last to first (runtime.cpp, fiber.cpp).
bool reverse_order();
void run_block(const LaunchShape& shape, uint3 block_idx, const std::function<void()>& body,
               std::vector<unsigned char>& shared);

// From a running kernel thread: fails the block (thrown by run_block once the thread yields).
void fail_block(const std::string& why);

}  // namespace ferry_emu
