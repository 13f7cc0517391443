// Gated DeltaNet per-head loops for the avx2 path: AVX2 + FMA: 16 ymm registers, 6×2 tile (12 accumulators).
#define FERRY_GDN_NS avx2
#define FERRY_GDN_VW 8
#define FERRY_GDN_MR 6
#define FERRY_GDN_NV 2
#include "kernels/cpu/gdn_core_impl.hpp"
