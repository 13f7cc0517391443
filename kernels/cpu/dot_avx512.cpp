// AVX-512 (F/BW/VL/DQ) dot-product kernels without VNNI; see dot_avx512_impl.hpp.
#include "kernels/cpu/dot_avx512_impl.hpp"

namespace ferry::cpu {

const detail::DotKernels& detail::dot_kernels_avx512() { return avx512_table<false>(); }

}  // namespace ferry::cpu
