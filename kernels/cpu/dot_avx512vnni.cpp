// AVX-512 VNNI dot-product kernels: the AVX-512 kernels with vpdpbusd (u8·s8 → s32) and vpdpwssd
// (s16·s16 → s32) in place of the maddubs/madd/add chains; see dot_avx512_impl.hpp.
#include "kernels/cpu/dot_avx512_impl.hpp"

namespace ferry::cpu {

const detail::DotKernels& detail::dot_kernels_avx512vnni() { return avx512_table<true>(); }

}  // namespace ferry::cpu
