// Gated DeltaNet per-head loops for the scalar path: baseline x86-64 (SSE2): 16 xmm registers, 4×2 tile.
#define FERRY_GDN_NS scalar
#define FERRY_GDN_VW 4
#define FERRY_GDN_MR 4
#define FERRY_GDN_NV 2
#include "kernels/cpu/gdn_core_impl.hpp"
