#include "offload/device_step.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "runtime/moe/group.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
size_t pad256(size_t n) {
  return (n + 255) / 256 * 256;
}

// Byte offsets of the step buffer: table | local ids | streamed pairs | CPU row indices.
struct StepLayout {
  size_t off_ids, off_pairs, off_rows, total;
  StepLayout(size_t n_table, int64_t nk)
      : off_ids(pad256(n_table * sizeof(ExpertPtrs))),
        off_pairs(off_ids + pad256(static_cast<size_t>(nk) * 4)),
        off_rows(off_pairs + pad256(static_cast<size_t>(nk) * 4)),
        total(off_rows + pad256(static_cast<size_t>(nk) * 4)) {}
  // The largest step of n tokens: every expert in the table, plus the two staging entries.
  static StepLayout worst(int64_t n, int32_t top_k, int32_t n_expert) {
    return StepLayout(static_cast<size_t>(n_expert) + 2, n * top_k);
  }
};

size_t y_bytes(int64_t n, int32_t top_k, int64_t n_embd) {
  return static_cast<size_t>(n) * static_cast<size_t>(top_k) * static_cast<size_t>(n_embd) *
         sizeof(float);
}

}  // namespace

uint64_t DeviceStep::device_bytes(int64_t max_batch, const ExpertShape& s, int32_t top_k,
                                  int32_t n_expert) {
  // The step buffer, y, and the expert kernels' scratch (max_batch · top_k · n_ff floats).
  return StepLayout::worst(max_batch, top_k, n_expert).total +
         pad256(y_bytes(max_batch, top_k, s.n_embd)) +
         pad256(static_cast<size_t>(max_batch) * static_cast<size_t>(top_k) *
                static_cast<size_t>(s.n_ff) * 4);
}

DeviceStep::DeviceStep(Device& dev, Stream& compute, DeviceExpertKernels& kernels, Residency& res,
                       const OffloadOptions& o, Event& compute_done)
    : dev_(dev),
      compute_(compute),
      kernels_(kernels),
      res_(res),
      o_(o),
      compute_done_(compute_done) {
  for (auto* e : {&kernels_done_, &cpu_ready_, &stream_begin_, &stream_end_})
    *e = dev_.create_event();
  // Buffers for max_batch tokens now, so the plan's step bytes cover them.
  const int32_t K = o_.plan.in.n_expert_used;
  int64_t max_embd = 0;
  for (const ExpertShape& sh : res_.shapes()) max_embd = std::max(max_embd, sh.n_embd);
  const StepLayout worst = StepLayout::worst(o_.max_batch, K, o_.plan.in.n_expert);
  step_host_ = dev_.alloc_host(worst.total, true);
  step_dev_ = dev_.alloc(worst.total, "offload step table");
  y_dev_ = dev_.alloc(y_bytes(o_.max_batch, K, max_embd), "offload per-slot outputs");
  cpu_rows_ = dev_.alloc_host(y_bytes(o_.max_batch, K, max_embd), true);
}

void DeviceStep::grow(DeviceBuffer& b, size_t bytes, const char* tag) {
  if (bytes <= b.bytes()) return;
  compute_.synchronize();  // queued kernels may still read the old buffer
  b = DeviceBuffer();
  b = dev_.alloc(bytes, tag);
}

void DeviceStep::grow(HostBuffer& b, size_t bytes) {
  if (bytes <= b.bytes()) return;
  compute_.synchronize();  // queued copies and kernels may still read the old buffer
  b = HostBuffer();
  b = dev_.alloc_host(bytes, true);
}

int64_t DeviceStep::cpu_part(const MoeStep& req, const std::vector<Resolved>& cpu,
                             const ExpertGroups& groups, int32_t* row_idx, Tracer* tracer) {
  const ExpertShape& shape = res_.shape(req.layer);
  const int64_t E = req.n_embd, K = req.top_k, n = req.n_tokens;
  std::vector<uint8_t>& on_cpu = on_cpu_;
  on_cpu.assign(static_cast<size_t>(res_.host_layer(req.layer).n_expert), 0);
  for (const Resolved& x : cpu) on_cpu[static_cast<size_t>(x.expert)] = 1;
  // The CPU experts write their rows at their (token, slot) positions of the pinned rows buffer,
  // (n, k, n_embd), with the CPU executor's code: one token as compute_decode, a group as the CPU
  // executor computes it (its pairs in token order, one batch).
  auto* rows = static_cast<float*>(cpu_rows_.data());
  if (n == 1) {
    std::vector<ExpertPtrs>& w = cpu_w_;
    std::vector<uint8_t>& mask = cpu_mask_;
    w.assign(static_cast<size_t>(K), ExpertPtrs{});
    mask.assign(static_cast<size_t>(K), 0);
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = req.expert_ids[j];
      mask[static_cast<size_t>(j)] = on_cpu[static_cast<size_t>(e)];
      if (mask[static_cast<size_t>(j)]) w[static_cast<size_t>(j)] = res_.host_ptrs(req.layer, e);
    }
    compute_decode(shape, req.x, w, mask, rows);
  } else {
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, cpu.size(), 1), [&](const tbb::blocked_range<size_t>& rg) {
          for (size_t i = rg.begin(); i < rg.end(); ++i) {
            const int32_t e = cpu[i].expert;
            Tracer::Span span(tracer, "cpu expert", "compute",
                              {{"layer", req.layer}, {"expert", e}, {"tokens", groups.size(e)}});
            compute_pairs(shape, cpu[i].w, req.x, static_cast<int32_t>(K), groups.group(e),
                          groups.size(e), rows);
          }
        });
  }
  // Compacted in place, in pair order, for the scatter on the device (a row only moves down).
  int64_t n_rows = 0;
  for (int64_t p = 0; p < n * K; ++p) {
    if (!on_cpu[static_cast<size_t>(req.expert_ids[p])]) continue;
    if (n_rows != p)
      std::memmove(rows + n_rows * E, rows + p * E, static_cast<size_t>(E) * sizeof(float));
    row_idx[n_rows++] = static_cast<int32_t>(p);
  }
  return n_rows;
}

void DeviceStep::run(const StepPlan& plan, const MoeStep& req, const MoeStep& dev,
                     StatsCounters& c, Tracer* tracer) {
  const std::vector<Resolved>& used = plan.experts;
  const int64_t routing_ready_ns = plan.routing_ready_ns;
  const uint64_t copy_wait0_ns = plan.copy_wait0_ns;
  const ExpertShape& shape = res_.shape(req.layer);
  const int32_t n_expert = res_.host_layer(req.layer).n_expert;
  const int64_t n = req.n_tokens, K = req.top_k, E = req.n_embd, nk = n * K;
  const auto t0 = Clock::now();
  // The host's step buffers are rewritten below: the previous step's copies and kernels that read
  // them must have run (on cuda the routing's synchronisation has already seen to it).
  compute_done_.synchronize();
  collect_waits(c);

  // The step's table: slot and mapped experts first, then the two staging slots; local ids per
  // pair.
  std::vector<ExpertPtrs>& table = table_;
  std::vector<int32_t>& index = index_;
  std::vector<Resolved>& cpu = cpu_;
  std::vector<Resolved>& streamed = streamed_;
  table.clear();
  index.assign(static_cast<size_t>(n_expert), -1);
  cpu.clear();
  streamed.clear();
  for (const Resolved& x : used) {
    if (x.pinned_slot >= 0 || x.mapped) {
      index[static_cast<size_t>(x.expert)] = static_cast<int32_t>(table.size());
      table.push_back(x.w);
    } else if (x.stream) {
      streamed.push_back(x);
    } else {
      cpu.push_back(x);
    }
  }
  const auto n_direct = static_cast<int32_t>(table.size());
  // A decode step carries its slots (and the CPU rows' indices) by value in the launches: no
  // table copy, which on the copy engine would queue behind the copy streams' expert transfers.
  const bool by_value = n == 1 && K <= DecodeSlots::kMaxSlots && streamed.empty();
  DecodeSlots slots;
  if (by_value)
    for (int64_t j = 0; j < K; ++j)
      if (const int32_t i = index[static_cast<size_t>(req.expert_ids[j])]; i >= 0)
        slots.w[static_cast<size_t>(j)] = table[static_cast<size_t>(i)];
  for (size_t b = 0; b < 2; ++b) table.push_back(res_.staging_ptrs(b, req.layer));
  const StepLayout lay(table.size(), nk);
  grow(step_host_, lay.total);
  grow(step_dev_, lay.total, "offload step table");
  grow(y_dev_, y_bytes(n, static_cast<int32_t>(K), E), "offload per-slot outputs");
  grow(cpu_rows_, y_bytes(n, static_cast<int32_t>(K), E));
  auto* h = static_cast<uint8_t*>(step_host_.data());
  // The pairs by expert: read by the streamed experts and by a batch's CPU experts only (a
  // decode's CPU experts take the routing as it is).
  ExpertGroups groups;
  if (n > 1 || !streamed.empty()) groups = group_by_expert(req.expert_ids, nk, n_expert);
  std::vector<int64_t>& pair_start = pair_start_;
  pair_start.assign(streamed.size() + 1, 0);
  if (!by_value) {
    std::copy(table.begin(), table.end(), reinterpret_cast<ExpertPtrs*>(h));
    auto* ids = reinterpret_cast<int32_t*>(h + lay.off_ids);
    for (int64_t i = 0; i < nk; ++i) ids[i] = index[static_cast<size_t>(req.expert_ids[i])];
    // Each streamed expert's pairs, in token order (its group of group_by_expert).
    auto* pairs = reinterpret_cast<int32_t*>(h + lay.off_pairs);
    for (size_t i = 0; i < streamed.size(); ++i) {
      const int64_t* g = groups.group(streamed[i].expert);
      const int64_t m = groups.size(streamed[i].expert);
      for (int64_t p = 0; p < m; ++p) pairs[pair_start[i] + p] = static_cast<int32_t>(g[p]);
      pair_start[i + 1] = pair_start[i] + m;
    }
  }
  if (const int64_t ready = routing_ready_ns; ready > 0) {
    // The compute stream idled from the routing's arrival until this first enqueue, less what the
    // host spent waiting on copies (counted as copy).
    const int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    const int64_t copy_waited = static_cast<int64_t>(c.wait_ns(WaitCause::copy) - copy_wait0_ns);
    c.wait(WaitCause::sync, static_cast<uint64_t>(std::max<int64_t>(0, now - ready - copy_waited)));
  }
  // The CPU rows' indices are written by cpu_part after this upload was queued: upload them with
  // the rows' scatter below, from the same pinned buffer.
  if (!by_value) compute_.copy_h2d(step_dev_.data(), h, lay.off_rows);
  auto* d = static_cast<uint8_t*>(step_dev_.data());
  const auto* d_table = reinterpret_cast<const ExpertPtrs*>(d);
  float* y = y_dev_.f32();

  Tracer::Span span(tracer, "experts", "compute",
                    {{"layer", req.layer},
                     {"experts", static_cast<int64_t>(used.size())},
                     {"cpu", static_cast<int64_t>(cpu.size())},
                     {"streamed", static_cast<int64_t>(streamed.size())}});
  // A decode step with every slot on the device sums in its down launch (experts_decode_sum).
  const bool summed = by_value && cpu.empty() && n_direct == K;
  if (summed)
    kernels_.experts_decode_sum(shape, slots, static_cast<int32_t>(K), dev.x, y, dev.expert_weights, dev.out,
                                compute_);
  else if (n_direct > 0 && by_value)
    kernels_.experts_decode(shape, slots, static_cast<int32_t>(K), dev.x, y, compute_);
  else if (n_direct > 0)
    kernels_.experts_per_slot(shape, d_table, static_cast<int64_t>(table.size()),
                              reinterpret_cast<const int32_t*>(d + lay.off_ids), n,
                              static_cast<int32_t>(K), dev.x, y, compute_);
  // Streamed experts: copy i+2 waits for the kernels that read copy i; the compute stream waits
  // for each copy. The host only enqueues.
  if (!streamed.empty()) {
    compute_.record(*stream_begin_);
    c.add(Count::stream_bytes, shape.expert_bytes() * streamed.size());
  }
  for (size_t i = 0; i < streamed.size(); ++i) {
    const size_t b = i % 2;
    res_.stage(req.layer, streamed[i].expert, b);
    compute_.wait(res_.staging_done(b));
    kernels_.expert_pairs_per_slot(
        shape, d_table + n_direct + b,
        reinterpret_cast<const int32_t*>(d + lay.off_pairs) + pair_start[i],
        pair_start[i + 1] - pair_start[i], static_cast<int32_t>(K), dev.x, y, compute_);
    compute_.record(res_.staging_free(b));
  }
  if (!streamed.empty()) {
    compute_.record(*stream_end_);
    pending_stream_ = true;
  }
  // CPU experts while the device works; their rows are scattered into y on the compute stream.
  if (!cpu.empty()) {
    compute_.record(*kernels_done_);
    const auto tc = Clock::now();
    RowIndex row_index;
    auto* row_idx = by_value ? row_index.i : reinterpret_cast<int32_t*>(h + lay.off_rows);
    const int64_t n_rows = cpu_part(req, cpu, groups, row_idx, tracer);
    compute_.record(
        *cpu_ready_);  // the device idled from kernels_done_ to here if it finished first
    pending_cpu_wait_ = true;
    // The rows are read in place from pinned host memory (no device copy of them).
    const auto* rows = static_cast<const float*>(dev_.mapped_view(cpu_rows_.data()));
    if (!rows)
      fail(ErrorKind::device,
           "offload: the CPU experts' pinned rows are not readable by the device");
    c.add(Count::cpu_ns, static_cast<uint64_t>(ms_since(tc) * 1e6));
    if (by_value) {  // the sum reads the rows where they are
      kernels_.weighted_sum_rows(y, rows, row_index, n_rows, dev.expert_weights, static_cast<int32_t>(K), E, dev.out,
                                 compute_);
    } else {
      compute_.copy_h2d(d + lay.off_rows, row_idx, static_cast<size_t>(n_rows) * 4);
      kernels_.scatter_rows(y, rows, reinterpret_cast<const int32_t*>(d + lay.off_rows), n_rows, E, compute_);
      kernels_.weighted_sum(y, dev.expert_weights, n, static_cast<int32_t>(K), E, dev.out, compute_);
    }
  } else if (!summed) {
    kernels_.weighted_sum(y, dev.expert_weights, n, static_cast<int32_t>(K), E, dev.out, compute_);
  }
  c.add(Count::compute_ns, static_cast<uint64_t>(ms_since(t0) * 1e6));
}

void DeviceStep::collect_waits(StatsCounters& c) {
  if (pending_cpu_wait_) {  // (both events recorded before the flag was set)
    c.wait(
        WaitCause::cpu_expert,
        static_cast<uint64_t>(std::max(0.0, cpu_ready_->elapsed_ms_since(*kernels_done_)) * 1e6));
    pending_cpu_wait_ = false;
  }
  if (pending_stream_) {
    c.add(Count::stream_gpu_ns,
          static_cast<uint64_t>(std::max(0.0, stream_end_->elapsed_ms_since(*stream_begin_)) * 1e6));
    pending_stream_ = false;
  }
}

double DeviceStep::time_kernels(const ExpertShape& s, const std::vector<ExpertPtrs>& entries) {
  // Layout in the step buffer (sized for max_batch ≥ 1 tokens): table | ids | x; y in y_dev_.
  const size_t x_bytes = static_cast<size_t>(s.n_embd) * sizeof(float);
  constexpr size_t kMax = 8;  // entries the layout below holds
  const size_t off_id = 256, off_x = 512, total = off_x + x_bytes;
  if (entries.empty() || entries.size() > kMax || total > step_dev_.bytes() ||
      total > step_host_.bytes() || x_bytes > y_dev_.bytes())
    return 0.0;
  auto* h = static_cast<uint8_t*>(step_host_.data());
  std::copy(entries.begin(), entries.end(), reinterpret_cast<ExpertPtrs*>(h));
  for (size_t i = 0; i < entries.size(); ++i)
    reinterpret_cast<int32_t*>(h + off_id)[i] = static_cast<int32_t>(i);
  auto* x = reinterpret_cast<float*>(h + off_x);
  for (int64_t i = 0; i < s.n_embd; ++i) x[i] = static_cast<float>((i * 7919) % 13) / 13.0f - 0.5f;
  compute_.copy_h2d(step_dev_.data(), h, total);
  auto* d = static_cast<uint8_t*>(step_dev_.data());
  const auto run = [&](size_t i) {
    kernels_.experts_per_slot(s, reinterpret_cast<const ExpertPtrs*>(d), static_cast<int64_t>(entries.size()),
                              reinterpret_cast<const int32_t*>(d + off_id) + i, 1, 1,
                              reinterpret_cast<const float*>(d + off_x), y_dev_.f32(), compute_);
  };
  run(0);
  const auto e0 = dev_.create_event(), e1 = dev_.create_event();
  double best_ms = 1e30;
  for (size_t i = 1; i < entries.size(); ++i) {
    compute_.record(*e0);
    run(i);
    compute_.record(*e1);
    e1->synchronize();
    best_ms = std::min(best_ms, e1->elapsed_ms_since(*e0));
  }
  return best_ms > 0 && best_ms < 1e30 ? static_cast<double>(s.expert_bytes()) / (best_ms * 1e6)
                                       : 0.0;
}

}  // namespace ferry
