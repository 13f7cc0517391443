#pragma once
// The structs one MoE step hands to the expert kernels, defined once for every side that builds
// or reads them: the CUDA kernels (kernels/cuda/moe.cuh), the CPU expert products
// (runtime/moe/cpu_experts.hpp) and the offload engine's device flow (offload/device_experts.hpp).
// Plain C++17 (the .cu files are compiled as C++17), trivially copyable: a table of them is copied
// to device memory as bytes, and DecodeSlots / RowIndex ride by value in a kernel launch.
#include <cstdint>

namespace ferry {

// One expert's matrices, each contiguous: gate, up (n_ff, n_embd) and down (n_embd, n_ff).
struct ExpertPtrs {
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
};
inline bool operator==(const ExpertPtrs& a, const ExpertPtrs& b) {
  return a.gate == b.gate && a.up == b.up && a.down == b.down;
}
inline bool operator!=(const ExpertPtrs& a, const ExpertPtrs& b) { return !(a == b); }

// A decode step's slots, carried by value in the kernel launch: no table copy, so the step never
// waits on a copy engine behind the copy streams' expert transfers. Slot j is computed when
// w[j].gate is not null.
struct DecodeSlots {
  static constexpr int kMaxSlots = 16;
  ExpertPtrs w[kMaxSlots];
};

// Up to kMax row indices (t·k + j of a step's per-slot outputs), by value in the launch.
struct RowIndex {
  static constexpr int kMax = 16;
  int32_t i[kMax] = {};
};

}  // namespace ferry
