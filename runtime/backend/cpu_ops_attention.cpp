// CpuOps: NEOX RoPE, KV-cache writes and causal GQA attention over the cache.
#include <algorithm>
#include <cmath>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry {
namespace {

void check_kv(const KvLayerView& kv, const char* what) {
  for (GgmlType t : {kv.type_k, kv.type_v})
    if (t != GgmlType::F16 && t != GgmlType::F32)
      fail(ErrorKind::unsupported, "{}: KV cache type {} is not supported (f16, f32)", what, type_name(t));
  if (!kv.k || !kv.v || kv.n_ctx <= 0 || kv.n_head_kv <= 0 || kv.head_dim_k <= 0 || kv.head_dim_v <= 0)
    fail(ErrorKind::internal, "{}: KV cache view is empty", what);
}

size_t elem_bytes(GgmlType t) { return t == GgmlType::F16 ? 2 : 4; }

void store_rows(GgmlType t, const float* src, void* dst, int64_t n) {
  if (t == GgmlType::F32) {
    std::copy(src, src + n, static_cast<float*>(dst));
  } else {
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
  }
}



}  // namespace

void CpuOps::rope_neox(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride,
                       int64_t head_stride, int32_t n_rot, const int32_t* pos, float freq_base) {
  if (n_rot <= 0 || n_rot % 2 != 0)
    fail(ErrorKind::invalid_arg, "rope: n_rot {} must be positive and even", n_rot);
  const int32_t half = n_rot / 2;
  // ggml builds the angle table per position by repeated multiplication in float
  // (theta_j = pos · scale^j); doing the same keeps the angles bit-identical to the oracle.
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tokens, 1), [&](auto r) {
    std::vector<float> cs(static_cast<size_t>(n_rot));
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      float theta = static_cast<float>(pos[t]);
      for (int32_t j = 0; j < half; ++j) {
        cs[2 * j] = std::cos(theta);
        cs[2 * j + 1] = std::sin(theta);
        theta *= theta_scale;
      }
      for (int64_t h = 0; h < n_head; ++h) {
        float* v = x + t * token_stride + h * head_stride;
        cpu_math::rotate_pairs(v, v + half, cs.data(), half);
      }
    }
  });
}

void CpuOps::kv_store(const KvLayerView& kv, int64_t pos0, int64_t n_tokens, const float* k,
                      const float* v) {
  check_kv(kv, "kv_store");
  if (pos0 < 0 || n_tokens < 0 || pos0 + n_tokens > kv.n_ctx)
    fail(ErrorKind::context, "kv_store: rows [{}, {}) outside the cache of {} rows", pos0,
         pos0 + n_tokens, kv.n_ctx);
  const int64_t nk = int64_t{kv.n_head_kv} * kv.head_dim_k;
  const int64_t nv = int64_t{kv.n_head_kv} * kv.head_dim_v;
  auto* kd = static_cast<uint8_t*>(kv.k) + static_cast<size_t>(pos0 * nk) * elem_bytes(kv.type_k);
  auto* vd = static_cast<uint8_t*>(kv.v) + static_cast<size_t>(pos0 * nv) * elem_bytes(kv.type_v);
  store_rows(kv.type_k, k, kd, n_tokens * nk);
  store_rows(kv.type_v, v, vd, n_tokens * nv);
}

void CpuOps::attention(const AttentionArgs& a) {
  const KvLayerView& kv = a.kv;
  check_kv(kv, "attention");
  if (a.n_head <= 0 || a.n_head % kv.n_head_kv != 0)
    fail(ErrorKind::invalid_arg, "attention: {} query heads is not a multiple of {} KV heads",
         a.n_head, kv.n_head_kv);
  if (a.pos0 < 0 || a.pos0 + a.n_tokens > kv.n_ctx)
    fail(ErrorKind::context, "attention: positions [{}, {}) outside the cache of {} rows", a.pos0,
         a.pos0 + a.n_tokens, kv.n_ctx);
  const int32_t group = a.n_head / kv.n_head_kv;
  const int32_t dk = kv.head_dim_k, dv = kv.head_dim_v;
  const bool k16 = kv.type_k == GgmlType::F16, v16 = kv.type_v == GgmlType::F16;
  const size_t kb = elem_bytes(kv.type_k), vb = elem_bytes(kv.type_v);
  const size_t k_row_bytes = static_cast<size_t>(kv.n_head_kv) * dk * kb;  // one cache row
  const size_t v_row_bytes = static_cast<size_t>(kv.n_head_kv) * dv * vb;
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  const int64_t n_tasks = int64_t{a.n_tokens} * kv.n_head_kv;
  // ggml runs attention products with 2+ query tokens through its tiled product (W lanes, lane l
  // accumulating elements l, l + W, ...), and those of a single token through vec_dot (32 slots
  // with its own reduction); following the one llama.cpp uses keeps decode and prefill bit-identical
  // to it.
  const bool single = a.n_tokens == 1;
  const int W = single ? 32 : cpu_math::tiled_lanes();
  const int64_t n_window = (a.pos0 + a.n_tokens + 15) / 16 * 16;

  // One task per (token, KV head): the `group` query heads that share a KV head are done together
  // so each cache row is read (and an F16 V row converted) once per group, not once per head.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tasks, 1), [&](auto r) {
    // Scores padded with -inf to a multiple of 16: llama.cpp's KV window is padded (masked), so its
    // softmax runs whole vector chunks; padding keeps our exp bits identical to its.
    std::vector<float> scores(static_cast<size_t>(group * n_window));      // (group, n_window)
    std::vector<float> qr(static_cast<size_t>(group) * dk), vrow(static_cast<size_t>(dv));
    std::vector<uint16_t> qh(static_cast<size_t>(group) * dk);              // single: F16 query bits
    std::vector<float> lanes(static_cast<size_t>(group) * W * dv);          // (group, W, dv)
    std::vector<float> inv(static_cast<size_t>(group));
    for (int64_t task = r.begin(); task < r.end(); ++task) {
      const int64_t t = task / kv.n_head_kv;
      const int32_t hk = static_cast<int32_t>(task % kv.n_head_kv);
      const int32_t h0 = hk * group;
      const int64_t n_kv = a.pos0 + t + 1;
      const int64_t n_pad = (n_kv + 15) / 16 * 16;
      for (int32_t g = 0; g < group; ++g) {
        const float* q = a.q + t * a.q_token_stride + (h0 + g) * a.q_head_stride;
        // An F16 cache is dotted in F16: ggml converts the query to vec_dot_type(F16) first.
        for (int32_t d = 0; d < dk; ++d) {
          qh[g * dk + d] = fp32_to_fp16(q[d]);
          qr[g * dk + d] = k16 ? fp16_to_fp32(qh[g * dk + d]) : q[d];
        }
      }
      for (int64_t j = 0; j < n_kv; ++j) {
        const uint8_t* krow = kbase + static_cast<size_t>(j) * k_row_bytes + static_cast<size_t>(hk) * dk * kb;
        for (int32_t g = 0; g < group; ++g) {
          const float dot = !single ? cpu_math::dot_lanes(krow, k16, qr.data() + g * dk, dk, W)
                            : k16   ? cpu_math::dot_vecdot(krow, qh.data() + g * dk, true, dk)
                                    : cpu_math::dot_vecdot(krow, qr.data() + g * dk, false, dk);
          scores[g * n_window + j] = dot * a.scale;
        }
      }
      for (int32_t g = 0; g < group; ++g) {
        float* sg = scores.data() + g * n_window;
        const float mx = *std::max_element(sg, sg + n_kv);
        std::fill(sg + n_kv, sg + n_pad, -INFINITY);
        inv[g] = static_cast<float>(1.0 / cpu_math::exp_sum(sg, sg, n_pad, mx));
      }
      // out = Σ_j p_j·v_j with lane (j mod W) partial sums, as ggml's tiled F16/F32 product (or,
      // for a single token, its vec_dot) runs over the (masked, zero-probability-padded) KV window.
      std::fill(lanes.begin(), lanes.end(), 0.0f);
      for (int64_t j = 0; j < n_kv; ++j) {
        const uint8_t* vr = vbase + static_cast<size_t>(j) * v_row_bytes + static_cast<size_t>(hk) * dv * vb;
        const float* vf = reinterpret_cast<const float*>(vr);
        if (v16) {
          cpu::dequantize_row(GgmlType::F16, vr, vrow.data(), dv);
          vf = vrow.data();
        }
        for (int32_t g = 0; g < group; ++g) {
          float p = scores[g * n_window + j] * inv[g];
          // ggml multiplies probabilities with an F16 V cache in F16: round them the same way.
          if (v16) p = fp16_to_fp32(fp32_to_fp16(p));
          cpu_math::axpy_fma(p, vf, lanes.data() + (static_cast<size_t>(g) * W + j % W) * dv, dv);
        }
      }
      for (int32_t g = 0; g < group; ++g) {
        const int32_t h = h0 + g;
        float* out = a.out + (t * a.n_head + h) * int64_t{dv};
        const float* lg = lanes.data() + static_cast<size_t>(g) * W * dv;
        float col[32];
        for (int32_t d = 0; d < dv; ++d) {
          for (int l = 0; l < W; ++l) col[l] = lg[static_cast<size_t>(l) * dv + d];
          out[d] = single ? cpu_math::vecdot_tree(col) : cpu_math::lane_tree(col, W);
        }
        if (a.gate) {
          const float* gt = a.gate + t * a.q_token_stride + h * a.q_head_stride;
          for (int32_t d = 0; d < dv; ++d) out[d] = out[d] * (1.0f / (1.0f + std::exp(-gt[d])));
        }
      }
    }
  });
}

}  // namespace ferry
