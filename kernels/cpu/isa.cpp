// Run-time ISA detection and the dispatch switch for the CPU kernels.
#include <atomic>

#include "kernels/cpu/matmul.hpp"

namespace ferry::cpu {
namespace {

Isa detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    if (__builtin_cpu_supports("avx512vnni")) return Isa::avx512vnni;
    return Isa::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::avx2;
#endif
  return Isa::scalar;
}

std::atomic<int>& active() {
  static std::atomic<int> a{static_cast<int>(detect())};
  return a;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512vnni: return "avx512vnni";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512vnni})
    if (name == isa_name(i)) return i;
  return std::nullopt;
}

Isa detected_isa() {
  static const Isa d = detect();
  return d;
}

Isa active_isa() { return static_cast<Isa>(active().load(std::memory_order_relaxed)); }

void set_isa(Isa isa) {
  if (isa > detected_isa()) isa = detected_isa();
  active().store(static_cast<int>(isa));
}

}  // namespace ferry::cpu
