// dequantize_row: the vectorized path where the CPU has one, else the reference (same bits).
#include "kernels/cpu/dot_kernels.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_check.hpp"

namespace ferry::cpu {

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  check_row(t, n, "dequantize_row");
#if defined(__x86_64__)
  if (active_isa() >= Isa::avx2 && detail::dequantize_row_avx2(t, src, dst, n)) return;
#endif
  dequantize_row_ref(t, src, dst, n);
}

}  // namespace ferry::cpu
