// CpuOps: memory, embedding, norms, products, elementwise ops and routing. Attention and RoPE
// live in cpu_ops_attention.cpp. Numerics mirror ggml's CPU ops (see ops.hpp).
#include "runtime/backend/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry {
namespace {

// Rows per task for cheap row-wise ops: enough work per task to amortise scheduling.
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

DeviceBuffer CpuOps::host_buffer(size_t bytes, size_t align) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) fail(ErrorKind::budget, "cpu: cannot allocate {} bytes of host memory", bytes);
  return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
}

DeviceBuffer CpuOps::alloc(size_t bytes) { return host_buffer(bytes, 64); }

void CpuOps::to_device(void* dst, const void* src_host, size_t bytes) {
  if (dst != src_host && bytes) std::memcpy(dst, src_host, bytes);
}

void CpuOps::to_host(void* dst_host, const void* src, size_t bytes) {
  if (dst_host != src && bytes) std::memcpy(dst_host, src, bytes);
}

void CpuOps::fill_zero(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}

void CpuOps::embed(const WeightView& table, const int32_t* ids, int64_t n, float* dst) {
  const uint64_t rb = row_bytes(table.type, static_cast<uint64_t>(table.cols));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table.rows)
      fail(ErrorKind::invalid_arg, "token id {} out of range (vocabulary has {} tokens)", ids[i],
           table.rows);
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, row_grain(table.cols)), [&](auto r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const auto* row = static_cast<const uint8_t*>(table.data) + static_cast<uint64_t>(ids[i]) * rb;
      cpu::dequantize_row(table.type, row, dst + i * table.cols, table.cols);
    }
  });
}

void CpuOps::rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld,
                     float eps, float* dst) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_rows, row_grain(n)), [&](auto r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const float* xr = x + i * ld;
      float* yr = dst + i * ld;
      // ggml: squares in float, summed in double; the scale is computed in float.
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(xr[j] * xr[j]);
      const float mean = static_cast<float>(sum / static_cast<double>(n));
      const float s = 1.0f / std::sqrt(mean + eps);
      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] * s) * w[j];
    }
  });
}

void CpuOps::matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n, float* y,
                    int64_t ldy) {
  if (w.type != GgmlType::F32 && w.type != GgmlType::F16) {
    cpu::matmul(w.type, w.data, w.rows, w.cols, x, ldx, n, y, ldy, true, w.layout);
    return;
  }
  // F32/F16 weights (F32 routers and gates of quantized models, F32/F16 test models) in the order
  // ggml adds them, which keeps these products bit-identical to the oracle's: its tiled product
  // (llamafile's tinyBLAS) when there are 2+ rows of activations, a multiple of 4 output rows and
  // of the lane width in the inner dimension; else ggml_vec_dot_f32 / _f16. An F16 weight is
  // dotted with the activation rounded to F16, as ggml converts it.
  const int W = cpu_math::tiled_lanes();
  const bool tiled = n >= 2 && w.rows % 4 == 0 && w.cols % W == 0;
  const bool w16 = w.type == GgmlType::F16;
  std::vector<float> xr;
  std::vector<uint16_t> xh;
  if (w16 && tiled) {
    xr.resize(static_cast<size_t>(n * w.cols));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < w.cols; ++c) xr[t * w.cols + c] = fp16_to_fp32(fp32_to_fp16(x[t * ldx + c]));
    x = xr.data();
    ldx = w.cols;
  } else if (w16) {
    xh.resize(static_cast<size_t>(n * w.cols));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < w.cols; ++c) xh[t * w.cols + c] = fp32_to_fp16(x[t * ldx + c]);
  }
  const size_t row_bytes_w = static_cast<size_t>(w.cols) * (w16 ? 2 : 4);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, w.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1))),
                    [&](auto r) {
    for (int64_t row = r.begin(); row < r.end(); ++row) {
      const void* wr = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * row_bytes_w;
      for (int64_t t = 0; t < n; ++t) {
        if (tiled)
          y[t * ldy + row] = cpu_math::dot_lanes(wr, w16, x + t * ldx, static_cast<int32_t>(w.cols), W);
        else if (w16)
          y[t * ldy + row] = cpu_math::dot_vecdot(wr, xh.data() + t * w.cols, true, static_cast<int32_t>(w.cols));
        else
          y[t * ldy + row] = cpu_math::dot_vecdot(wr, x + t * ldx, false, static_cast<int32_t>(w.cols));
      }
    }
  });
}

void CpuOps::swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n, float* dst) {
  // Row by row: ggml's vector chunks start at each row's first element.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_rows, row_grain(n)), [&](auto r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) cpu_math::swiglu(gate + i * n, up + i * n, dst + i * n, n);
  });
}

void CpuOps::moe_route(const float* logits, int64_t n_tokens, int32_t n_expert, int32_t top_k,
                       bool renormalize, float scale, int32_t* ids, float* weights) {
  if (top_k <= 0 || top_k > n_expert)
    fail(ErrorKind::invalid_arg, "moe_route: top_k {} outside [1, n_expert = {}]", top_k, n_expert);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tokens, 8), [&](auto r) {
    std::vector<float> p(static_cast<size_t>(n_expert));
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      const float* l = logits + t * n_expert;
      // softmax as ggml_soft_max: exp(x - max) in float, sum in double, scaled by float(1/sum)
      float mx = -INFINITY;
      for (int32_t e = 0; e < n_expert; ++e) mx = std::max(mx, l[e]);
      const double sum = cpu_math::exp_sum(l, p.data(), n_expert, mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int32_t e = 0; e < n_expert; ++e) p[e] *= inv;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                        [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      int32_t* id = ids + t * top_k;
      float* wt = weights + t * top_k;
      float wsum = 0.0f;
      for (int32_t k = 0; k < top_k; ++k) {
        id[k] = order[k];
        wt[k] = p[order[k]];
        wsum += wt[k];
      }
      if (renormalize) {
        wsum = std::max(wsum, 6.103515625e-5f);  // smallest normal F16, as llama.cpp clamps
        for (int32_t k = 0; k < top_k; ++k) wt[k] /= wsum;
      }
      if (scale != 0.0f && scale != 1.0f)
        for (int32_t k = 0; k < top_k; ++k) wt[k] *= scale;
    }
  });
}

void CpuOps::add(const float* a, const float* b, int64_t n, float* dst) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 32768), [&](auto r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) dst[i] = a[i] + b[i];
  });
}

void CpuOps::scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuOps::sigmoid_gated_add(const float* x, const float* gate_logit, int64_t n_tokens, int64_t n,
                               float* dst) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_tokens, row_grain(n)), [&](auto r) {
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      const float g = sigmoid(gate_logit[t]);
      for (int64_t j = 0; j < n; ++j) dst[t * n + j] += g * x[t * n + j];
    }
  });
}

void CpuOps::argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (xr[j] > xr[best]) best = j;
    out[r] = static_cast<int32_t>(best);
  }
}

}  // namespace ferry
