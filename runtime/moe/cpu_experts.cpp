#include "runtime/moe/cpu_experts.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include "runtime/moe/cpu_executor.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// A one-expert layer over the three matrices at w (each matrix's "expert stride" is its size).
MoeLayerWeights one_expert(const ExpertShape& s, const ExpertPtrs& w) {
  MoeLayerWeights L;
  L.gate = ExpertTensor{w.gate, s.gate_type, s.n_embd, s.n_ff, s.gate_bytes()};
  L.up = ExpertTensor{w.up, s.up_type, s.n_embd, s.n_ff, s.up_bytes()};
  L.down = ExpertTensor{w.down, s.down_type, s.n_ff, s.n_embd, s.down_bytes()};
  L.n_expert = 1;
  return L;
}

// out (n, n_embd) = expert(x) for n rows of x, through MoeCpuExecutor (top_k 1, weight 1).
void run_one(const ExpertShape& s, const ExpertPtrs& w, const float* x, int64_t n, float* out) {
  MoeCpuExecutor ex({one_expert(s, w)});
  const std::vector<int32_t> ids(static_cast<size_t>(n), 0);
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  MoeStep r;
  r.layer = 0;
  r.n_tokens = static_cast<int32_t>(n);
  r.n_embd = static_cast<int32_t>(s.n_embd);
  r.top_k = 1;
  r.x = x;
  r.expert_ids = ids.data();
  r.expert_weights = ones.data();
  r.out = out;
  ex.run(r);
}

}  // namespace

uint64_t ExpertShape::gate_bytes() const {
  return row_bytes(gate_type, static_cast<uint64_t>(n_embd)) * static_cast<uint64_t>(n_ff);
}
uint64_t ExpertShape::up_bytes() const {
  return row_bytes(up_type, static_cast<uint64_t>(n_embd)) * static_cast<uint64_t>(n_ff);
}
uint64_t ExpertShape::down_bytes() const {
  return row_bytes(down_type, static_cast<uint64_t>(n_ff)) * static_cast<uint64_t>(n_embd);
}

ExpertShape expert_shape(const MoeLayerWeights& L) {
  return ExpertShape{L.gate.type, L.up.type, L.down.type, L.gate.n_in, L.gate.n_out};
}

ExpertPtrs expert_ptrs(const MoeLayerWeights& L, int32_t e) {
  const auto off = [e](const ExpertTensor& t) {
    return t.base + static_cast<uint64_t>(e) * t.expert_stride_bytes;
  };
  return ExpertPtrs{off(L.gate), off(L.up), off(L.down)};
}

ExpertBatch::ExpertBatch(const ExpertShape& s, const MoeStep& req, int32_t n_expert)
    : s_(s),
      x_(req.x),
      top_k_(req.top_k),
      groups_(group_by_expert(req.expert_ids, int64_t{req.n_tokens} * req.top_k, n_expert)) {}

void ExpertBatch::compute_group(int32_t e, const ExpertPtrs& w, float* y) const {
  compute_pairs(s_, w, x_, top_k_, groups_.group(e), group_size(e), y);
}

void compute_pairs(const ExpertShape& s, const ExpertPtrs& w, const float* x, int32_t top_k,
                   const int64_t* pairs, int64_t n, float* y) {
  if (n == 0) return;
  const int64_t K = top_k, E = s.n_embd;
  std::vector<float> xg(static_cast<size_t>(n * E)), ye(static_cast<size_t>(n * E));  // (n, E)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(xg.data() + i * E, x + (pairs[i] / K) * E, static_cast<size_t>(E) * sizeof(float));
  run_one(s, w, xg.data(), n, ye.data());
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(y + pairs[i] * E, ye.data() + i * E, static_cast<size_t>(E) * sizeof(float));
}

void compute_decode(const ExpertShape& s, const float* x, std::span<const ExpertPtrs> w,
                    std::span<const uint8_t> compute, float* y) {
  // Experts in parallel (each runs its own row-block loop inside): independent outputs, so the
  // order does not change any bit.
  tbb::parallel_for(tbb::blocked_range<size_t>(0, w.size(), 1),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t k = r.begin(); k < r.end(); ++k)
                        if (compute[k])
                          run_one(s, w[k], x, 1, y + static_cast<int64_t>(k) * s.n_embd);
                    });
}

}  // namespace ferry
