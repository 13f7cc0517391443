// Gated DeltaNet per-head loops for the avx512 path: AVX-512: 32 zmm registers, 6×4 tile (24 accumulators).
#define FERRY_GDN_NS avx512
#define FERRY_GDN_VW 16
#define FERRY_GDN_MR 6
#define FERRY_GDN_NV 4
#include "kernels/cpu/gdn_core_impl.hpp"
