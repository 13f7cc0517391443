#include "runtime/moe/cpu_executor.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/moe/group.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// Rows per task in the decode path: 64 rows of a 2048-wide Q4_K matrix are ~72 KB, enough work to
// amortise a task and small enough that 8 experts × 768 rows give ~100 tasks to balance.
constexpr int64_t kDecodeRowBlock = 64;

const uint8_t* expert_matrix(const ExpertTensor& t, int32_t e) {
  return t.base + static_cast<uint64_t>(e) * t.expert_stride_bytes;
}

// Y = X·Wᵀ with X already in vec_dot_type(w). F32/F16 experts are dotted in the order of
// ggml_vec_dot_f32/f16 (what ggml's expert product uses for them), so F32 test models match the
// oracle bit for bit; quantized experts go through the kernels' matmul_q.
void expert_matmul(GgmlType w, const uint8_t* W, int64_t rows, int64_t cols, const uint8_t* Xq,
                   int64_t ldxq, int64_t n, float* Y, int64_t ldy, bool parallel,
                   WeightLayout layout) {
  if (w != GgmlType::F32 && w != GgmlType::F16) {
    cpu::matmul_q(w, W, rows, cols, Xq, ldxq, n, Y, ldy, parallel, false, layout);
    return;
  }
  const uint64_t rb = row_bytes(w, static_cast<uint64_t>(cols));
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t t = 0; t < n; ++t)
        Y[t * ldy + r] = cpu_math::dot_vecdot(W + r * rb, Xq + t * ldxq, w == GgmlType::F16,
                                              static_cast<int32_t>(cols));
  };
  if (!parallel) return body(0, rows);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, 16),
                    [&](auto r) { body(r.begin(), r.end()); });
}

uint64_t act_row_bytes(GgmlType weight, int64_t n) {
  return row_bytes(cpu::vec_dot_type(weight), static_cast<uint64_t>(n));
}

}  // namespace

MoeCpuExecutor::MoeCpuExecutor(std::vector<MoeLayerWeights> layers) : layers_(std::move(layers)) {
  for (size_t il = 0; il < layers_.size(); ++il) {
    const MoeLayerWeights& L = layers_[il];
    if (L.gate.n_in != L.up.n_in || L.gate.n_out != L.up.n_out || L.down.n_in != L.gate.n_out ||
        L.down.n_out != L.gate.n_in || L.n_expert <= 0 || !L.gate.base || !L.up.base ||
        !L.down.base)
      fail(ErrorKind::format,
           "layer {}: expert tensors disagree (gate {{{}, {}}}, up {{{}, {}}}, down {{{}, {}}}, {} "
           "experts)",
           il, L.gate.n_in, L.gate.n_out, L.up.n_in, L.up.n_out, L.down.n_in, L.down.n_out,
           L.n_expert);
  }
}

void MoeCpuExecutor::run(const MoeStep& req) {
  check_step(req, layers_, "cpu moe");
  const MoeLayerWeights& L = layers_[static_cast<size_t>(req.layer)];
  check_step_ids(req, L.n_expert, "cpu moe");
  if (req.n_tokens == 0) return;
  if (observed()) observers_->routing(req);
  if (req.n_tokens == 1)
    run_decode(req, L);
  else
    run_grouped(req, L);
  if (observed()) observers_->step_end(req.layer);
}

void MoeCpuExecutor::run_decode(const MoeStep& req, const MoeLayerWeights& L) {
  const int32_t K = req.top_k;
  const int64_t E = L.gate.n_in, F = L.gate.n_out;
  // x quantized once for gate and once for up (only when their activation types differ).
  const uint64_t gq_bytes = act_row_bytes(L.gate.type, E), uq_bytes = act_row_bytes(L.up.type, E);
  std::vector<uint8_t> xq_gate(gq_bytes), xq_up_own;
  cpu::quantize_activation(L.gate.type, req.x, xq_gate.data(), E);
  const uint8_t* xq_up = xq_gate.data();
  if (cpu::vec_dot_type(L.up.type) != cpu::vec_dot_type(L.gate.type)) {
    xq_up_own.resize(uq_bytes);
    cpu::quantize_activation(L.up.type, req.x, xq_up_own.data(), E);
    xq_up = xq_up_own.data();
  }
  const uint64_t gate_row = row_bytes(L.gate.type, static_cast<uint64_t>(E));
  const uint64_t up_row = row_bytes(L.up.type, static_cast<uint64_t>(E));
  const uint64_t down_row = row_bytes(L.down.type, static_cast<uint64_t>(F));

  std::vector<float> g(static_cast<size_t>(K * F)), u(static_cast<size_t>(K * F));  // (K, F)
  const int64_t f_blocks = (F + kDecodeRowBlock - 1) / kDecodeRowBlock;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, K * f_blocks, 1), [&](auto r) {
    for (int64_t task = r.begin(); task < r.end(); ++task) {
      const int32_t s = static_cast<int32_t>(task / f_blocks);
      const int64_t r0 = (task % f_blocks) * kDecodeRowBlock,
                    nr = std::min(kDecodeRowBlock, F - r0);
      const int32_t e = req.expert_ids[s];
      expert_matmul(L.gate.type, expert_matrix(L.gate, e) + r0 * gate_row, nr, E, xq_gate.data(),
                    static_cast<int64_t>(gq_bytes), 1, g.data() + s * F + r0, F, false,
                    L.gate.layout);
      expert_matmul(L.up.type, expert_matrix(L.up, e) + r0 * up_row, nr, E, xq_up,
                    static_cast<int64_t>(uq_bytes), 1, u.data() + s * F + r0, F, false, L.up.layout);
      // r0 is a multiple of 64: ggml's SiLU vector chunks line up with the row's.
      cpu_math::swiglu(g.data() + s * F + r0, u.data() + s * F + r0, g.data() + s * F + r0, nr);
    }
  });

  const uint64_t hq_bytes = act_row_bytes(L.down.type, F);
  std::vector<uint8_t> hq(static_cast<size_t>(K) * hq_bytes);  // (K) rows of quantized h
  for (int32_t s = 0; s < K; ++s)
    cpu::quantize_activation(L.down.type, g.data() + s * F, hq.data() + s * hq_bytes, F);

  std::vector<float> y(static_cast<size_t>(K * E));  // (K, E)
  const int64_t e_blocks = (E + kDecodeRowBlock - 1) / kDecodeRowBlock;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, K * e_blocks, 1), [&](auto r) {
    for (int64_t task = r.begin(); task < r.end(); ++task) {
      const int32_t s = static_cast<int32_t>(task / e_blocks);
      const int64_t r0 = (task % e_blocks) * kDecodeRowBlock,
                    nr = std::min(kDecodeRowBlock, E - r0);
      expert_matmul(L.down.type, expert_matrix(L.down, req.expert_ids[s]) + r0 * down_row, nr, F,
                    hq.data() + s * hq_bytes, static_cast<int64_t>(hq_bytes), 1,
                    y.data() + s * E + r0, E, false, L.down.layout);
    }
  });
  weighted_sum(1, K, E, y.data(), req.expert_weights, req.out);
}

void MoeCpuExecutor::run_grouped(const MoeStep& req, const MoeLayerWeights& L) {
  const int64_t N = req.n_tokens;
  const int32_t K = req.top_k;
  const int64_t E = L.gate.n_in, F = L.gate.n_out;
  const bool shared_q = cpu::vec_dot_type(L.up.type) == cpu::vec_dot_type(L.gate.type);
  const uint64_t gq_bytes = act_row_bytes(L.gate.type, E), uq_bytes = act_row_bytes(L.up.type, E);
  const uint64_t hq_bytes = act_row_bytes(L.down.type, F);

  // Every token's x quantized once: (N) rows for gate, and for up when its type differs.
  std::vector<uint8_t> xq_gate(static_cast<size_t>(N) * gq_bytes), xq_up_own;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, N, 4), [&](auto r) {
    for (int64_t t = r.begin(); t < r.end(); ++t)
      cpu::quantize_activation(L.gate.type, req.x + t * E, xq_gate.data() + t * gq_bytes, E);
  });
  if (!shared_q) {
    xq_up_own.resize(static_cast<size_t>(N) * uq_bytes);
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, N, 4), [&](auto r) {
      for (int64_t t = r.begin(); t < r.end(); ++t)
        cpu::quantize_activation(L.up.type, req.x + t * E, xq_up_own.data() + t * uq_bytes, E);
    });
  }
  const uint8_t* xq_up = shared_q ? xq_gate.data() : xq_up_own.data();

  const ExpertGroups groups = group_by_expert(req.expert_ids, N * K, L.n_expert);

  std::vector<float> y(static_cast<size_t>(N * K * E));  // (N, K, E): each slot's expert output
  tbb::parallel_for(tbb::blocked_range<int32_t>(0, L.n_expert, 1), [&](auto r) {
    for (int32_t e = r.begin(); e < r.end(); ++e) {
      const int64_t n_e = groups.size(e);
      if (n_e == 0) continue;
      const int64_t* idx = groups.group(e);
      std::vector<uint8_t> xg(static_cast<size_t>(n_e) * gq_bytes), xu;  // gathered activations
      for (int64_t i = 0; i < n_e; ++i)
        std::memcpy(xg.data() + i * gq_bytes, xq_gate.data() + (idx[i] / K) * gq_bytes, gq_bytes);
      const uint8_t* xup = xg.data();
      if (!shared_q) {
        xu.resize(static_cast<size_t>(n_e) * uq_bytes);
        for (int64_t i = 0; i < n_e; ++i)
          std::memcpy(xu.data() + i * uq_bytes, xq_up + (idx[i] / K) * uq_bytes, uq_bytes);
        xup = xu.data();
      }
      std::vector<float> g(static_cast<size_t>(n_e * F)),
          u(static_cast<size_t>(n_e * F));  // (n_e, F)
      expert_matmul(L.gate.type, expert_matrix(L.gate, e), F, E, xg.data(),
                    static_cast<int64_t>(gq_bytes), n_e, g.data(), F, true, L.gate.layout);
      expert_matmul(L.up.type, expert_matrix(L.up, e), F, E, xup, static_cast<int64_t>(uq_bytes),
                    n_e, u.data(), F, true, L.up.layout);
      std::vector<uint8_t> hq(static_cast<size_t>(n_e) * hq_bytes);
      for (int64_t i = 0; i < n_e; ++i) {
        float* gi = g.data() + i * F;
        cpu_math::swiglu(gi, u.data() + i * F, gi, F);
        cpu::quantize_activation(L.down.type, gi, hq.data() + i * hq_bytes, F);
      }
      std::vector<float> ye(static_cast<size_t>(n_e * E));  // (n_e, E)
      expert_matmul(L.down.type, expert_matrix(L.down, e), E, F, hq.data(),
                    static_cast<int64_t>(hq_bytes), n_e, ye.data(), E, true, L.down.layout);
      for (int64_t i = 0; i < n_e; ++i)
        std::memcpy(y.data() + idx[i] * E, ye.data() + i * E,
                    static_cast<size_t>(E) * sizeof(float));
    }
  });

  weighted_sum(N, K, E, y.data(), req.expert_weights, req.out);
}

}  // namespace ferry
