#pragma once
// Internal to the Gated DeltaNet kernels: the per-head work items and the per-ISA entry points.
// gdn_core_impl.hpp is compiled three times (gdn_core.cpp, gdn_core_avx2.cpp, gdn_core_avx512.cpp)
// into the namespaces declared here; gdn.cpp picks one by active_isa() and runs heads in parallel.
#include <cstdint>

namespace ferry::cpu::gdn_detail {

// One value head's slice of a delta-rule call. Pointers are already offset to this head: q and k
// to its key head's vector of token 0, v/out to its own vector, g/beta to column h.
struct HeadArgs {
  const float* q;  int64_t ldq;   // (n_tokens, S) rows, stride ldq
  const float* k;  int64_t ldk;   // (n_tokens, S)
  const float* v;  int64_t ldv;   // (n_tokens, S)
  const float* g;                 // (n_tokens) with stride ldgb
  const float* beta;              // (n_tokens) with stride ldgb
  int64_t ldgb;
  float* state;                   // (S, S) key-major: state[i*S + j] = S[key i][value j]
  float* out;      int64_t ldo;   // (n_tokens, S)
  int64_t n_tokens;
  int32_t head_dim;               // S, a multiple of 16
  float scale;                    // applied to q
};

// Scratch the chunked form needs per concurrently processed head.
int64_t chunk_scratch_floats(int32_t head_dim);

#define FERRY_GDN_DECLARE_ISA(ns)                                   \
  namespace ns {                                                    \
  void recurrent_head(const HeadArgs& a);                           \
  void chunked_head(const HeadArgs& a, float* scratch);             \
  }
FERRY_GDN_DECLARE_ISA(scalar)
FERRY_GDN_DECLARE_ISA(avx2)
FERRY_GDN_DECLARE_ISA(avx512)
#undef FERRY_GDN_DECLARE_ISA

}  // namespace ferry::cpu::gdn_detail
