#include "offload/cpu_experts.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// The decode row block of MoeCpuExecutor (results do not depend on it: each row is one dot with
// one activation row, but keeping the same tasks keeps the same speed characteristics).
constexpr int64_t kDecodeRowBlock = 64;

uint64_t act_row_bytes(GgmlType weight, int64_t n) {
  return row_bytes(cpu::vec_dot_type(weight), static_cast<uint64_t>(n));
}

}  // namespace

uint64_t ExpertShape::gate_bytes() const { return row_bytes(gate_type, static_cast<uint64_t>(n_embd)) * static_cast<uint64_t>(n_ff); }
uint64_t ExpertShape::up_bytes() const { return row_bytes(up_type, static_cast<uint64_t>(n_embd)) * static_cast<uint64_t>(n_ff); }
uint64_t ExpertShape::down_bytes() const { return row_bytes(down_type, static_cast<uint64_t>(n_ff)) * static_cast<uint64_t>(n_embd); }

ExpertShape expert_shape(const MoeLayerWeights& L) {
  return ExpertShape{L.gate.type, L.up.type, L.down.type, L.gate.n_in, L.gate.n_out};
}

ExpertPtrs3 expert_ptrs(const MoeLayerWeights& L, int32_t e) {
  const auto off = [e](const ExpertTensor& t) { return t.base + static_cast<uint64_t>(e) * t.expert_stride_bytes; };
  return ExpertPtrs3{off(L.gate), off(L.up), off(L.down)};
}

ExpertBatch::ExpertBatch(const ExpertShape& s, const MoeRequest& req, int32_t n_expert)
    : s_(s), top_k_(req.top_k) {
  const int64_t N = req.n_tokens, K = req.top_k, E = s.n_embd;
  shared_q_ = cpu::vec_dot_type(s.up_type) == cpu::vec_dot_type(s.gate_type);
  gq_bytes_ = act_row_bytes(s.gate_type, E);
  uq_bytes_ = act_row_bytes(s.up_type, E);
  hq_bytes_ = act_row_bytes(s.down_type, s.n_ff);
  xq_gate_.resize(static_cast<size_t>(N) * gq_bytes_);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, N, 4), [&](auto r) {
    for (int64_t t = r.begin(); t < r.end(); ++t)
      cpu::quantize_activation(s.gate_type, req.x + t * E, xq_gate_.data() + t * gq_bytes_, E);
  });
  if (!shared_q_) {
    xq_up_.resize(static_cast<size_t>(N) * uq_bytes_);
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, N, 4), [&](auto r) {
      for (int64_t t = r.begin(); t < r.end(); ++t)
        cpu::quantize_activation(s.up_type, req.x + t * E, xq_up_.data() + t * uq_bytes_, E);
    });
  }
  // Counting sort by expert keeps tokens in order within a group (MoeCpuExecutor's grouping).
  start_.assign(static_cast<size_t>(n_expert) + 1, 0);
  for (int64_t i = 0; i < N * K; ++i) ++start_[static_cast<size_t>(req.expert_ids[i]) + 1];
  for (int32_t e = 0; e < n_expert; ++e) start_[e + 1] += start_[e];
  pairs_.resize(static_cast<size_t>(N * K));
  std::vector<int64_t> fill(start_.begin(), start_.end() - 1);
  for (int64_t i = 0; i < N * K; ++i) pairs_[static_cast<size_t>(fill[req.expert_ids[i]]++)] = i;
}

void ExpertBatch::compute_group(int32_t e, const ExpertPtrs3& w, float* y, bool parallel) const {
  const int64_t n_e = group_size(e);
  if (n_e == 0) return;
  const int64_t K = top_k_, E = s_.n_embd, F = s_.n_ff;
  const int64_t* idx = pairs_.data() + start_[e];
  std::vector<uint8_t> xg(static_cast<size_t>(n_e) * gq_bytes_), xu;  // gathered activations
  for (int64_t i = 0; i < n_e; ++i)
    std::memcpy(xg.data() + i * gq_bytes_, xq_gate_.data() + (idx[i] / K) * gq_bytes_, gq_bytes_);
  const uint8_t* xup = xg.data();
  if (!shared_q_) {
    xu.resize(static_cast<size_t>(n_e) * uq_bytes_);
    for (int64_t i = 0; i < n_e; ++i)
      std::memcpy(xu.data() + i * uq_bytes_, xq_up_.data() + (idx[i] / K) * uq_bytes_, uq_bytes_);
    xup = xu.data();
  }
  std::vector<float> g(static_cast<size_t>(n_e * F)), u(static_cast<size_t>(n_e * F));  // (n_e, F)
  cpu::matmul_q(s_.gate_type, w.gate, F, E, xg.data(), static_cast<int64_t>(gq_bytes_), n_e, g.data(), F, parallel);
  cpu::matmul_q(s_.up_type, w.up, F, E, xup, static_cast<int64_t>(uq_bytes_), n_e, u.data(), F, parallel);
  std::vector<uint8_t> hq(static_cast<size_t>(n_e) * hq_bytes_);
  for (int64_t i = 0; i < n_e; ++i) {
    float* gi = g.data() + i * F;
    cpu_math::swiglu(gi, u.data() + i * F, gi, F);  // ggml's SiLU, as MoeCpuExecutor
    cpu::quantize_activation(s_.down_type, gi, hq.data() + i * hq_bytes_, F);
  }
  std::vector<float> ye(static_cast<size_t>(n_e * E));  // (n_e, E)
  cpu::matmul_q(s_.down_type, w.down, E, F, hq.data(), static_cast<int64_t>(hq_bytes_), n_e, ye.data(), E, parallel);
  for (int64_t i = 0; i < n_e; ++i)
    std::memcpy(y + idx[i] * E, ye.data() + i * E, static_cast<size_t>(E) * sizeof(float));
}

void compute_decode(const ExpertShape& s, const float* x, std::span<const ExpertPtrs3> w,
                    std::span<const uint8_t> compute, float* y) {
  const auto K = static_cast<int64_t>(w.size());
  const int64_t E = s.n_embd, F = s.n_ff;
  std::vector<int32_t> slots;  // the slots computed here
  for (int64_t k = 0; k < K; ++k)
    if (compute[static_cast<size_t>(k)]) slots.push_back(static_cast<int32_t>(k));
  const auto n = static_cast<int64_t>(slots.size());
  if (n == 0) return;
  const uint64_t gq_bytes = act_row_bytes(s.gate_type, E), uq_bytes = act_row_bytes(s.up_type, E);
  std::vector<uint8_t> xq_gate(gq_bytes), xq_up_own;
  cpu::quantize_activation(s.gate_type, x, xq_gate.data(), E);
  const uint8_t* xq_up = xq_gate.data();
  if (cpu::vec_dot_type(s.up_type) != cpu::vec_dot_type(s.gate_type)) {
    xq_up_own.resize(uq_bytes);
    cpu::quantize_activation(s.up_type, x, xq_up_own.data(), E);
    xq_up = xq_up_own.data();
  }
  const uint64_t gate_row = row_bytes(s.gate_type, static_cast<uint64_t>(E));
  const uint64_t up_row = row_bytes(s.up_type, static_cast<uint64_t>(E));
  const uint64_t down_row = row_bytes(s.down_type, static_cast<uint64_t>(F));

  std::vector<float> g(static_cast<size_t>(n * F)), u(static_cast<size_t>(n * F));  // (n, F)
  const int64_t f_blocks = (F + kDecodeRowBlock - 1) / kDecodeRowBlock;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n * f_blocks, 1), [&](auto r) {
    for (int64_t task = r.begin(); task < r.end(); ++task) {
      const int64_t i = task / f_blocks;
      const ExpertPtrs3& p = w[static_cast<size_t>(slots[static_cast<size_t>(i)])];
      const int64_t r0 = (task % f_blocks) * kDecodeRowBlock, nr = std::min(kDecodeRowBlock, F - r0);
      cpu::matmul_q(s.gate_type, p.gate + r0 * gate_row, nr, E, xq_gate.data(), static_cast<int64_t>(gq_bytes), 1,
                    g.data() + i * F + r0, F, false);
      cpu::matmul_q(s.up_type, p.up + r0 * up_row, nr, E, xq_up, static_cast<int64_t>(uq_bytes), 1,
                    u.data() + i * F + r0, F, false);
      // r0 is a multiple of 64: ggml's SiLU vector chunks line up with the whole row's.
      cpu_math::swiglu(g.data() + i * F + r0, u.data() + i * F + r0, g.data() + i * F + r0, nr);
    }
  });
  const uint64_t hq_bytes = act_row_bytes(s.down_type, F);
  std::vector<uint8_t> hq(static_cast<size_t>(n) * hq_bytes);  // (n) quantized rows of h
  for (int64_t i = 0; i < n; ++i)
    cpu::quantize_activation(s.down_type, g.data() + i * F, hq.data() + i * hq_bytes, F);
  const int64_t e_blocks = (E + kDecodeRowBlock - 1) / kDecodeRowBlock;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n * e_blocks, 1), [&](auto r) {
    for (int64_t task = r.begin(); task < r.end(); ++task) {
      const int64_t i = task / e_blocks;
      const int32_t k = slots[static_cast<size_t>(i)];
      const int64_t r0 = (task % e_blocks) * kDecodeRowBlock, nr = std::min(kDecodeRowBlock, E - r0);
      cpu::matmul_q(s.down_type, w[static_cast<size_t>(k)].down + r0 * down_row, nr, F, hq.data() + i * hq_bytes,
                    static_cast<int64_t>(hq_bytes), 1, y + k * E + r0, E, false);
    }
  });
}

void weighted_sum(const MoeRequest& req, const float* y) {
  const int64_t E = req.n_embd;
  const int32_t K = req.top_k;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, req.n_tokens, 1), [&](auto r) {
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      float* out = req.out + t * E;
      const float* w = req.expert_weights + t * K;
      const float* yt = y + t * K * E;
      for (int64_t j = 0; j < E; ++j) out[j] = yt[j] * w[0];
      for (int32_t s = 1; s < K; ++s)
        for (int64_t j = 0; j < E; ++j) out[j] += yt[s * E + j] * w[s];
    }
  });
}

}  // namespace ferry
