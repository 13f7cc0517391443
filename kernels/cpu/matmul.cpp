// matmul / matmul_q: activations quantized once per call, then weight rows dotted with them in
// parallel over rows (oneTBB). For n_batch > 1 the rows are walked in tiles that stay in L1/L2
// while every activation row passes by, so each weight byte comes from DRAM once per call.
#include "kernels/cpu/matmul.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_kernels.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_check.hpp"
#include "kernels/cpu/rows16.hpp"
#include "runtime/core/error.hpp"

namespace ferry::cpu {
namespace {

using detail::kMaxNx;

// Weight bytes of one row tile in the batched path: well inside L1d (48 KiB on recent cores)
// next to kMaxNx activation rows.
constexpr int64_t kTileBytes = 24 * 1024;
// Below this much work (weight bytes × activation rows) a call runs on the calling thread:
// spawning tasks costs a few microseconds.
constexpr int64_t kMinParallelWork = 256 * 1024;
// Interleaved row streams per matvec task, and the fewest rows per stream worth splitting for.
constexpr int64_t kStreams = 4;
constexpr int64_t kMinStreamRows = 4;
// Fewest weight bytes in a task's range for the streams: a smaller range (the 64-row blocks of an
// expert's matrix in decode) is read as one sequential stream, which the hardware prefetchers
// follow from its first lines, where four short ones each start cold. On the Zen 4 VM, qwen3moe
// small-preset Q2_K decode ran 53-55 t/s with four streams in every range and 64-68 with one below
// 1 MiB, while a 256 MiB matrix reads as fast either way
// (bench/results/2026-12-04-cpu-rows16-zen4.md).
constexpr int64_t kMinStreamBytes = int64_t{1} << 20;
// Fewest activation rows for which llama.cpp's CPU backend takes its tiled K-quant kernel.
constexpr int64_t kTiledMinRows = 8;
// Weight rows a matrix must have a multiple of for ggml-cpu to repack it (8-row interleaving).
constexpr int64_t kRepackRows = 8;
// Fewest activation rows for which llamafile's tinyBLAS takes a dense product.
constexpr int64_t kTinyblasMinRows = 2;
// Smallest chunk of work one task gets.
constexpr int64_t kMinTaskWork = 64 * 1024;
// Fewest activation rows for which a Q4_K product packs them lane-wise (the activation rows in the
// vector lanes; below this a pack is mostly padding and the other kernels are faster), for dense
// products (Q4_K's 4-row order) and expert products (its 1-row order). Q2_K, Q3_K, Q5_K, Q6_K and
// IQ4_XS pack them whenever they take the tiled order (kTiledMinRows).
constexpr int64_t kLanesMinRows = 8;
constexpr int64_t kLanesMinRowsExpert = 10;

void check_matmul(const char* what, GgmlType w, int64_t rows, int64_t cols, int64_t n_batch,
                  int64_t ldy) {
  check_row(w, cols, what);
  if (rows < 0 || n_batch < 0)
    fail(ErrorKind::invalid_arg, "{}: negative size (rows {}, n_batch {})", what, rows, n_batch);
  if (n_batch > 1 && ldy < rows)
    fail(ErrorKind::invalid_arg, "{}: output stride {} is smaller than rows {}", what, ldy, rows);
}

struct Job {
  detail::DotFn dot;
  detail::DotRowsFn dot_rows;  // kMaxRows rows at once, or nullptr
  detail::DotFn dot_grouped;   // full groups of kMaxNx rows (dense products; see matmul.hpp)
  const uint8_t* W;            // (rows, w_row_bytes)
  size_t w_row_bytes;
  int64_t cols;
  const uint8_t* Xq;  // (n_batch, ldxq bytes)
  size_t ldxq;
  int64_t n_batch;
  float* Y;  // (n_batch, ldy)
  int64_t ldy;
  // Lane-packed activations (lanes_fn): the first n_lanes rows in packs of kLanes rows,
  // pack_stride bytes apart; the rest (< 4, dense Q4_K's tail) go through dot.
  detail::LanesFn lanes = nullptr;
  const uint8_t* packs = nullptr;
  size_t pack_stride = 0;
  int64_t n_lanes = 0;

  void rows(int64_t r0, int64_t r1) const {
    float tmp[kMaxNx];
    if (lanes) {
      const int tail = static_cast<int>(n_batch - n_lanes);
      for (int64_t r = r0; r < r1; r += detail::kLanesWeightRows) {
        const int nw = static_cast<int>(std::min<int64_t>(detail::kLanesWeightRows, r1 - r));
        lanes(cols, W + r * w_row_bytes, w_row_bytes, nw, packs, pack_stride, n_lanes, Y + r,
              static_cast<size_t>(ldy));
        for (int64_t rr = r; tail > 0 && rr < r + nw; ++rr) {
          dot(cols, W + rr * w_row_bytes, Xq + n_lanes * ldxq, ldxq, tail, tmp);
          for (int j = 0; j < tail; ++j) Y[(n_lanes + j) * ldy + rr] = tmp[j];
        }
      }
      return;
    }
    if (dot_rows) {
      // kMaxRows weight rows side by side (more than kStreams sequential streams), within tiles of
      // the batched path as below, of whole groups (the interleaved layout has no partial ones).
      const int64_t tile =
          n_batch == 1 ? r1 - r0
                       : std::max<int64_t>(1, kTileBytes / static_cast<int64_t>(w_row_bytes) /
                                                  detail::kMaxRows) *
                             detail::kMaxRows;
      for (int64_t t0 = r0; t0 < r1; t0 += tile) {
        const int64_t t1 = std::min(r1, t0 + tile);
        for (int64_t b = 0; b < n_batch; b += kMaxNx) {
          const int nx = static_cast<int>(std::min<int64_t>(kMaxNx, n_batch - b));
          for (int64_t r = t0; r < t1; r += detail::kMaxRows) {
            const int nw = static_cast<int>(std::min<int64_t>(detail::kMaxRows, t1 - r));
            dot_rows(cols, W + r * w_row_bytes, w_row_bytes, nw, Xq + b * ldxq, ldxq, nx,
                     Y + b * ldy + r, static_cast<size_t>(ldy));
          }
        }
      }
      return;
    }
    if (n_batch == 1) {
      // Matvec: memory-bound. The range is walked as kStreams interleaved sub-ranges, one row of
      // each in turn: several sequential streams per core keep more DRAM reads in flight than one
      // (measured: bench/results/2026-11-29-matvec-cpu.md).
      const int64_t len = r1 - r0;
      const int64_t streams = len >= kStreams * kMinStreamRows &&
                                      len * static_cast<int64_t>(w_row_bytes) >= kMinStreamBytes
                                  ? kStreams
                                  : 1;
      const int64_t sub = (len + streams - 1) / streams;
      for (int64_t i = 0; i < sub; ++i)
        for (int64_t s = 0; s < streams; ++s) {
          const int64_t r = r0 + s * sub + i;
          if (r < r1) dot(cols, W + r * w_row_bytes, Xq, ldxq, 1, Y + r);
        }
      return;
    }
    const int64_t tile = std::max<int64_t>(1, kTileBytes / static_cast<int64_t>(w_row_bytes));
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t t1 = std::min(r1, t0 + tile);
      for (int64_t b = 0; b < n_batch; b += kMaxNx) {
        const int nx = static_cast<int>(std::min<int64_t>(kMaxNx, n_batch - b));
        const uint8_t* x = Xq + b * ldxq;
        const detail::DotFn f = nx == kMaxNx ? dot_grouped : dot;
        for (int64_t r = t0; r < t1; ++r) {
          f(cols, W + r * w_row_bytes, x, ldxq, nx, tmp);
          for (int j = 0; j < nx; ++j) Y[(b + j) * ldy + r] = tmp[j];
        }
      }
    }
  }
};

void run(const Job& job, int64_t rows, bool parallel) {
  const int64_t work_per_row = static_cast<int64_t>(job.w_row_bytes) * job.n_batch;
  if (!parallel || rows * work_per_row < kMinParallelWork ||
      tbb::this_task_arena::max_concurrency() <= 1) {
    job.rows(0, rows);
    return;
  }
  int64_t grain = std::max<int64_t>(1, kMinTaskWork / std::max<int64_t>(1, work_per_row));
  if (job.n_batch > 1)  // whole tiles per task
    grain = std::max<int64_t>(grain, kTileBytes / static_cast<int64_t>(job.w_row_bytes));
  // The several-rows kernels get whole groups of kMaxRows (a partial group takes their slower
  // path).
  const int64_t unit = job.lanes ? detail::kLanesWeightRows : job.dot_rows ? detail::kMaxRows : 1;
  grain = (grain + unit - 1) / unit;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, (rows + unit - 1) / unit, static_cast<size_t>(grain)),
      [&job, unit, rows](const tbb::blocked_range<int64_t>& r) {
        job.rows(r.begin() * unit, std::min(rows, r.end() * unit));
      });
}

// The order llama.cpp's x86 CPU backend (AVX2 build) adds a product in, by weight type and shape
// (matmul.hpp). Q4_K's 4-row groups are chosen per group in Job::rows.
detail::DotOrder order_for(GgmlType w, int64_t rows, int64_t n_batch, bool dense) {
  using detail::DotOrder;
  switch (w) {
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
      // Repacked (q4_0 / iq4_nl / mxfp4 8x8 gemv and gemm) whenever the row count allows, for dense
      // and expert products alike; else IQ4_NL's dense products of 2+ rows go to tinyBLAS.
      if (rows % kRepackRows == 0) return DotOrder::repacked;
      return dense && n_batch >= kTinyblasMinRows ? DotOrder::tinyblas : DotOrder::row;
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS:
      return n_batch >= kTiledMinRows ? DotOrder::tiled : DotOrder::row;
    default:
      return DotOrder::row;
  }
}

// The lane-packed kernel a product takes (dot_kernels.hpp), or nullptr.
detail::LanesFn lanes_fn(const detail::DotKernels& k, GgmlType w, detail::DotOrder order,
                         int64_t n_batch, bool dense) {
  switch (w) {
    case GgmlType::Q4_K:
      if (dense) return n_batch >= kLanesMinRows ? k.q4_k_group4_lanes : nullptr;
      return n_batch >= kLanesMinRowsExpert ? k.q4_k_lanes : nullptr;
    case GgmlType::Q2_K:
      return order == detail::DotOrder::tiled ? k.q2_k_tiled_lanes : nullptr;
    case GgmlType::Q3_K:
      return order == detail::DotOrder::tiled ? k.q3_k_tiled_lanes : nullptr;
    case GgmlType::Q5_K:
      return order == detail::DotOrder::tiled ? k.q5_k_tiled_lanes : nullptr;
    case GgmlType::Q6_K:
      return order == detail::DotOrder::tiled ? k.q6_k_tiled_lanes : nullptr;
    case GgmlType::IQ4_XS:
      return order == detail::DotOrder::tiled ? k.iq4_xs_tiled_lanes : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace

void detail::pack_q8k_lanes(const void* x, size_t x_stride, int nx, int64_t nb, uint8_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(nb) * kLanesBlockBytes);
  for (int k = 0; k < nx; ++k) {
    const auto* row = static_cast<const uint8_t*>(x) + static_cast<size_t>(k) * x_stride;
    for (int64_t i = 0; i < nb; ++i) {
      BlockQ8K y;  // the rows may sit at any byte offset
      std::memcpy(&y, row + i * sizeof(BlockQ8K), sizeof y);
      uint8_t* b = dst + i * kLanesBlockBytes;
      for (int g = 0; g < kQK_K / 4; ++g) std::memcpy(b + 4 * (g * kLanes + k), y.qs + 4 * g, 4);
      std::memcpy(b + kLanesDOffset + 4 * k, &y.d, 4);
      for (int c = 0; c < 4; ++c) {
        const int16_t pair[2] = {static_cast<int16_t>(y.bsums[4 * c] + y.bsums[4 * c + 1]),
                                 static_cast<int16_t>(y.bsums[4 * c + 2] + y.bsums[4 * c + 3])};
        std::memcpy(b + kLanesBsumOffset + 64 * c + 4 * k, pair, 4);
      }
      for (int p = 0; p < 8; ++p)
        std::memcpy(b + kLanesBsum16Offset + 64 * p + 4 * k, y.bsums + 2 * p, 4);
    }
  }
}

void matmul_q(GgmlType w, const void* W, int64_t rows, int64_t cols, const void* Xq, int64_t ldxq,
              int64_t n_batch, float* Y, int64_t ldy, bool parallel, bool dense,
              WeightLayout layout) {
  check_matmul("matmul_q", w, rows, cols, n_batch, ldy);
  const detail::DotKernels& kernels = detail::dot_kernels(active_isa());
  detail::DotRowsFn rows16 = nullptr;
  if (layout == WeightLayout::rows16) {
    if (!rows16_type(w) || rows % kRows16 != 0)
      fail(ErrorKind::invalid_arg, "matmul_q: a {} matrix of {} rows has no interleaved layout",
           type_name(w), rows);
    rows16 = detail::dot_rows16_fn(kernels, w);
    if (!rows16) {  // this ISA has no kernel for the layout: the file layout's, on a copy
      std::vector<uint8_t> file(static_cast<size_t>(rows) *
                                row_bytes(w, static_cast<uint64_t>(cols)));
      unpack_rows16(w, W, rows, cols, file.data());
      return matmul_q(w, file.data(), rows, cols, Xq, ldxq, n_batch, Y, ldy, parallel, dense);
    }
  }
  const detail::DotOrder order = order_for(w, rows, n_batch, dense);
  const detail::DotFn dot = detail::dot_fn(kernels, w, order);
  if (!dot) fail(ErrorKind::unsupported, "matmul_q: type {} is not a weight type", type_name(w));
  const auto x_row_bytes =
      static_cast<int64_t>(row_bytes(vec_dot_type(w), static_cast<uint64_t>(cols)));
  if (n_batch > 1 && ldxq < x_row_bytes)
    fail(ErrorKind::invalid_arg, "matmul_q: activation stride {} B is smaller than a row ({} B)",
         ldxq, x_row_bytes);
  if (rows == 0 || n_batch == 0) return;
  static_assert(kMaxNx == 4, "the grouped order is ggml's 4-row kernel's");
  // Q4_K's several-rows kernel adds in its 1-row order: not for the full 4-row groups of a dense
  // product, which take the 4-row order (dot_grouped below).
  const detail::DotRowsFn dot_rows = rows16 ? rows16
                                     : w == GgmlType::Q4_K && dense && n_batch >= kMaxNx
                                         ? nullptr
                                         : detail::dot_rows_fn(kernels, w, order);
  Job job{dot,
          dot_rows,
          dense && w == GgmlType::Q4_K ? detail::dot_fn(kernels, w, detail::DotOrder::group4) : dot,
          static_cast<const uint8_t*>(W),
          static_cast<size_t>(row_bytes(w, static_cast<uint64_t>(cols))),
          cols,
          static_cast<const uint8_t*>(Xq),
          static_cast<size_t>(ldxq),
          n_batch,
          Y,
          ldy};
  const detail::LanesFn lanes = lanes_fn(kernels, w, order, n_batch, dense);
  std::vector<uint8_t> packs;
  if (lanes) {
    const int64_t nb = cols / kQK_K;
    job.lanes = lanes;
    // Q4_K's 4-row order covers the full groups of 4 rows (the rest take dot's 1-row order).
    job.n_lanes = dense && w == GgmlType::Q4_K ? n_batch - n_batch % kMaxNx : n_batch;
    job.pack_stride = static_cast<size_t>(nb) * detail::kLanesBlockBytes;
    const int64_t n_packs = (job.n_lanes + detail::kLanes - 1) / detail::kLanes;
    // Not thread_local: an expert product runs inside a task, and while this thread waits in run()'s
    // parallel_for TBB may hand it another expert's product, which would reuse the buffer.
    packs.resize(static_cast<size_t>(n_packs) * job.pack_stride);
    for (int64_t p = 0; p < n_packs; ++p)
      detail::pack_q8k_lanes(
          job.Xq + p * detail::kLanes * job.ldxq, job.ldxq,
          static_cast<int>(std::min<int64_t>(detail::kLanes, job.n_lanes - p * detail::kLanes)), nb,
          packs.data() + p * job.pack_stride);
    job.packs = packs.data();
  }
  run(job, rows, parallel);
}

void matmul(GgmlType w, const void* W, int64_t rows, int64_t cols, const float* X, int64_t ldx,
            int64_t n_batch, float* Y, int64_t ldy, bool parallel, WeightLayout layout) {
  check_matmul("matmul", w, rows, cols, n_batch, ldy);
  if (n_batch > 1 && ldx < cols)
    fail(ErrorKind::invalid_arg, "matmul: input stride {} is smaller than cols {}", ldx, cols);
  if (rows == 0 || n_batch == 0) return;
  const GgmlType vt = vec_dot_type(w);
  if (vt == GgmlType::F32) {  // F32 weights dot the float activations as they are
    matmul_q(w, W, rows, cols, X, ldx * 4, n_batch, Y, ldy, parallel, true);
    return;
  }
  const auto x_row_bytes = static_cast<size_t>(row_bytes(vt, static_cast<uint64_t>(cols)));
  std::vector<uint8_t> xq(x_row_bytes * static_cast<size_t>(n_batch));  // (n_batch, x_row_bytes)
  auto quantize = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      quantize_activation(w, X + b * ldx, xq.data() + b * x_row_bytes, cols);
  };
  if (parallel && n_batch > 1 && n_batch * cols >= 64 * 1024)
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_batch),
                      [&](const tbb::blocked_range<int64_t>& r) { quantize(r.begin(), r.end()); });
  else
    quantize(0, n_batch);
  matmul_q(w, W, rows, cols, xq.data(), static_cast<int64_t>(x_row_bytes), n_batch, Y, ldy,
           parallel, true, layout);
}

}  // namespace ferry::cpu
