// AVX-512 (F/BW/VL/DQ) dot-product kernels without VNNI; see dot_avx512_impl.hpp.
#include "kernels/cpu/dot_avx512_impl.hpp"

namespace ferry::cpu {

const detail::DotKernels& detail::dot_kernels_avx512() {
  // Q4_K's 4-row order runs faster in the 256-bit kernel (its per-chunk sums need no folding).
  static const detail::DotKernels k = [] {
    detail::DotKernels t = kAvx512Table<false>;
    t.q4_k_group4 = detail::dot_kernels_avx2().q4_k_group4;
    return t;
  }();
  return k;
}

}  // namespace ferry::cpu
