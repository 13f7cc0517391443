// CpuOps: NEOX RoPE, KV-cache writes and causal GQA attention over the cache. F16/F32 caches
// follow llama.cpp without flash attention (its KQ and KQV products); any other cache type (or
// pair) follows its CPU flash attention, the only path llama.cpp has for a quantized V.
#include <algorithm>
#include <cmath>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "kernels/cpu/hadamard.hpp"
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
    if (!kv_cache_type_supported(t))
      fail(ErrorKind::unsupported, "{}: KV cache type {} is not supported ({})", what, type_name(t),
           kv_cache_type_names());
  if (!kv.k || !kv.v || kv.n_ctx <= 0 || kv.n_head_kv <= 0 || kv.head_dim_k <= 0 || kv.head_dim_v <= 0)
    fail(ErrorKind::internal, "{}: KV cache view is empty", what);
}

bool is_plain(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::F32; }

// ggml_is_quantized for the cache types: everything but F32, F16, BF16.
bool is_block_type(GgmlType t) { return type_info(t).block_values > 1; }

// llama.cpp's Hadamard rotation sizes for this cache (kernels/cpu/hadamard.hpp; 0: none).
int32_t rot_k(const KvLayerView& kv) { return cpu::kv_rotation_k(is_block_type(kv.type_k), kv.head_dim_k); }
int32_t rot_v(const KvLayerView& kv) { return cpu::kv_rotation_v(is_block_type(kv.type_v), kv.head_dim_v); }

// llama.cpp's CPU flash attention (ggml_compute_forward_flash_attn_ext_f16_one_chunk, the path it
// takes whenever a cache is neither F16 nor F32 or K and V differ in type), per query row: the
// query converted to vec_dot_type(K) (Q8_0/Q8_1 for quantized K, as its from_float writes them),
// s = vec_dot(k_j, q)·scale, an online softmax with libm expf, and V accumulated in F16 (an F16 V
// cache: each step rounds to F16) or in F32 (any other V, dequantized row by row). A quantized
// cache holds Hadamard-rotated rows (kv_store): the query is rotated like K, the output back like V.
// A task takes a token and a run of query heads that share a KV head, so each cache row is read,
// and a quantized V row dequantized, once per run instead of once per head; every head keeps its
// own softmax and accumulator, so the arithmetic per head is unchanged. The runs are halved until
// there are tasks for every thread (decode of a model with few KV heads).
void attention_flash(const AttentionArgs& a) {
  const KvLayerView& kv = a.kv;
  const int32_t group = a.n_head / kv.n_head_kv;
  const int32_t dk = kv.head_dim_k, dv = kv.head_dim_v;
  const size_t k_head_bytes = kv.k_head_bytes(), v_head_bytes = kv.v_head_bytes();
  const size_t k_row_bytes = k_head_bytes * kv.n_head_kv, v_row_bytes = v_head_bytes * kv.n_head_kv;
  const size_t q_bytes = static_cast<size_t>(row_bytes(cpu::vec_dot_type(kv.type_k), static_cast<uint64_t>(dk)));
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  const bool v16 = kv.type_v == GgmlType::F16, v32 = kv.type_v == GgmlType::F32;
  const int32_t n_rot_k = rot_k(kv), n_rot_v = rot_v(kv);
  int32_t run = group;  // query heads per task, a divisor of group
  const int64_t want = 2 * int64_t{tbb::this_task_arena::max_concurrency()};
  while (run % 2 == 0 && int64_t{a.n_tokens} * a.n_head / run < want) run /= 2;
  const int64_t n_tasks = int64_t{a.n_tokens} * (a.n_head / run);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tasks, 1), [&](auto r) {
    const auto R = static_cast<size_t>(run);
    std::vector<uint8_t> qq(R * q_bytes);                   // the queries in vec_dot_type(K)
    std::vector<float> acc(R * dv), vrow(static_cast<size_t>(dv));
    std::vector<uint16_t> acc16(R * dv);                    // F16 V: ggml's F16 accumulator
    std::vector<float> qrot(static_cast<size_t>(dk)), S(R), M(R);
    for (int64_t task = r.begin(); task < r.end(); ++task) {
      const int64_t t = task / (a.n_head / run);
      const int32_t h0 = static_cast<int32_t>(task % (a.n_head / run)) * run, hk = h0 / group;
      const int64_t n_kv = a.pos0 + t + 1;
      for (int32_t g = 0; g < run; ++g) {
        const float* q = a.q + t * a.q_token_stride + (h0 + g) * a.q_head_stride;
        if (n_rot_k) {  // the query rotated as the cache's keys were
          std::copy(q, q + dk, qrot.data());
          cpu::hadamard_rotate(qrot.data(), dk, n_rot_k);
          q = qrot.data();
        }
        cpu::quantize_activation(kv.type_k, q, qq.data() + g * q_bytes, dk);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(acc16.begin(), acc16.end(), uint16_t{0});
      std::fill(S.begin(), S.end(), 0.0f);
      std::fill(M.begin(), M.end(), -INFINITY);
      for (int64_t j = 0; j < n_kv; ++j) {
        const uint8_t* krow = kbase + static_cast<size_t>(j) * k_row_bytes + static_cast<size_t>(hk) * k_head_bytes;
        const uint8_t* vr = vbase + static_cast<size_t>(j) * v_row_bytes + static_cast<size_t>(hk) * v_head_bytes;
        const float* vf = reinterpret_cast<const float*>(vr);
        if (!v16 && !v32) {
          cpu::dequantize_row(kv.type_v, vr, vrow.data(), dv);
          vf = vrow.data();
        }
        for (int32_t g = 0; g < run; ++g) {
          float* ag = acc.data() + static_cast<size_t>(g) * dv;
          uint16_t* ag16 = acc16.data() + static_cast<size_t>(g) * dv;
          const float s = cpu::vec_dot(kv.type_k, krow, qq.data() + g * q_bytes, dk) * a.scale;
          float ms = 1.0f, vs = 1.0f;
          if (s > M[g]) {  // a new maximum: rescale what was summed, this row counts exp(0) = 1
            ms = std::exp(M[g] - s);
            M[g] = s;
            if (v16)
              cpu_math::scale_f16(ms, ag16, dv);
            else
              for (int32_t d = 0; d < dv; ++d) ag[d] *= ms;
          } else {
            vs = std::exp(s - M[g]);
          }
          if (v16) {
            cpu_math::axpy_f16(vs, reinterpret_cast<const uint16_t*>(vr), ag16, dv);
          } else {
            cpu_math::axpy_fma(vs, vf, ag, dv);
          }
          S[g] = std::fma(S[g], ms, vs);  // ggml's S*ms + vs, contracted by its compiler
        }
      }
      for (int32_t g = 0; g < run; ++g) {
        const int32_t h = h0 + g;
        float* ag = acc.data() + static_cast<size_t>(g) * dv;
        if (v16)
          for (int32_t d = 0; d < dv; ++d) ag[d] = fp16_to_fp32(acc16[static_cast<size_t>(g) * dv + d]);
        const float s_inv = S[g] == 0.0f ? 0.0f : 1.0f / S[g];
        float* out = a.out + (t * a.n_head + h) * int64_t{dv};
        for (int32_t d = 0; d < dv; ++d) out[d] = ag[d] * s_inv;
        if (n_rot_v) cpu::hadamard_rotate(out, dv, n_rot_v);  // back from the cache's rotated V
        if (a.gate) {
          const float* gt = a.gate + t * a.q_token_stride + h * a.q_head_stride;
          for (int32_t d = 0; d < dv; ++d) out[d] = out[d] * (1.0f / (1.0f + std::exp(-gt[d])));
        }
      }
    }
  });
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
  // A cache row of one position is n_head_kv head rows of whole blocks, so quantizing the token's
  // (n_head_kv·head_dim) values as one row gives each head row its own blocks.
  const size_t k_row_bytes = kv.k_head_bytes() * kv.n_head_kv, v_row_bytes = kv.v_head_bytes() * kv.n_head_kv;
  auto* kd = static_cast<uint8_t*>(kv.k) + static_cast<size_t>(pos0) * k_row_bytes;
  auto* vd = static_cast<uint8_t*>(kv.v) + static_cast<size_t>(pos0) * v_row_bytes;
  // Quantized K and V rows are Hadamard-rotated first, as llama.cpp does (attention undoes it).
  const int32_t n_rot_k = rot_k(kv), n_rot_v = rot_v(kv);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tokens, 1), [&](auto r) {
    std::vector<float> rk(n_rot_k ? static_cast<size_t>(nk) : 0), rv(n_rot_v ? static_cast<size_t>(nv) : 0);
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      const float* kt = k + t * nk;
      const float* vt = v + t * nv;
      if (n_rot_k) {
        std::copy(kt, kt + nk, rk.data());
        cpu::hadamard_rotate(rk.data(), nk, n_rot_k);
        kt = rk.data();
      }
      if (n_rot_v) {
        std::copy(vt, vt + nv, rv.data());
        cpu::hadamard_rotate(rv.data(), nv, n_rot_v);
        vt = rv.data();
      }
      cpu::quantize_row_cpu(kv.type_k, kt, kd + static_cast<size_t>(t) * k_row_bytes, nk);
      cpu::quantize_row_cpu(kv.type_v, vt, vd + static_cast<size_t>(t) * v_row_bytes, nv);
    }
  });
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
  if (!is_plain(kv.type_k) || !is_plain(kv.type_v)) {
    attention_flash(a);
    return;
  }
  const int32_t group = a.n_head / kv.n_head_kv;
  const int32_t dk = kv.head_dim_k, dv = kv.head_dim_v;
  const bool k16 = kv.type_k == GgmlType::F16, v16 = kv.type_v == GgmlType::F16;
  const size_t k_head_bytes = kv.k_head_bytes(), v_head_bytes = kv.v_head_bytes();
  const size_t k_row_bytes = k_head_bytes * kv.n_head_kv;  // one cache row
  const size_t v_row_bytes = v_head_bytes * kv.n_head_kv;
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
        const uint8_t* krow = kbase + static_cast<size_t>(j) * k_row_bytes + static_cast<size_t>(hk) * k_head_bytes;
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
        const uint8_t* vr = vbase + static_cast<size_t>(j) * v_row_bytes + static_cast<size_t>(hk) * v_head_bytes;
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
