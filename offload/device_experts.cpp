#include "offload/device_experts.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// The sim "kernels": the CPU expert code, run on the sim stream's worker in stream order. The
// pointers are sim-arena (host) memory that stays valid until the stream has run this work.
class SimExpertKernels final : public DeviceExpertKernels {
 public:
  void experts_per_slot(const ExpertShape& s, const ExpertPtrs* table, int64_t /*n_table*/, const int32_t* ids,
                        int64_t n_tokens, int32_t k, const float* x, float* y_slots,
                        Stream& stream) override {
    stream.host_fn([s, table, ids, n_tokens, k, x, y_slots] {
      if (n_tokens == 1) {
        std::vector<ExpertPtrs> w(static_cast<size_t>(k));
        for (int32_t j = 0; j < k; ++j)
          if (ids[j] >= 0) w[static_cast<size_t>(j)] = table[ids[j]];
        return decode(s, w, x, y_slots);
      }
      // Prefill: the pairs with ids ≥ 0 grouped by table entry, tokens in order (as the CPU
      // executor groups the step), each group one batch.
      std::vector<int32_t> entry;  // table entry of each computed pair
      std::vector<int64_t> pair;   // its t·k + j
      for (int64_t p = 0; p < n_tokens * k; ++p)
        if (ids[p] >= 0) {
          entry.push_back(ids[p]);
          pair.push_back(p);
        }
      if (entry.empty()) return;
      const int32_t n_entries = *std::max_element(entry.begin(), entry.end()) + 1;
      const ExpertGroups g =
          group_by_expert(entry.data(), static_cast<int64_t>(entry.size()), n_entries);
      // Entries in parallel (each writes only its own rows; each batch's bits do not depend on it).
      tbb::parallel_for(tbb::blocked_range<int32_t>(0, n_entries, 1), [&](const tbb::blocked_range<int32_t>& r) {
        std::vector<int64_t> rows;
        for (int32_t e = r.begin(); e < r.end(); ++e) {
          if (g.size(e) == 0) continue;
          rows.resize(static_cast<size_t>(g.size(e)));
          for (int64_t i = 0; i < g.size(e); ++i)
            rows[static_cast<size_t>(i)] = pair[static_cast<size_t>(g.group(e)[i])];
          compute_pairs(s, table[e], x, k, rows.data(), g.size(e), y_slots);
        }
      });
    });
  }

  void experts_decode(const ExpertShape& s, const DecodeSlots& slots, int32_t k, const float* x,
                      float* y_slots, Stream& stream) override {
    if (k > DecodeSlots::kMaxSlots)
      fail(ErrorKind::invalid_arg, "sim experts: a decode step of {} slots (at most {})", k,
           DecodeSlots::kMaxSlots);
    stream.host_fn([s, slots, k, x, y_slots] {
      decode(s, std::span<const ExpertPtrs>(slots.w, static_cast<size_t>(k)), x, y_slots);
    });
  }

  void expert_pairs_per_slot(const ExpertShape& s, const ExpertPtrs* expert, const int32_t* pairs,
                             int64_t n_pairs, int32_t k, const float* x, float* y_slots,
                             Stream& stream) override {
    stream.host_fn([s, expert, pairs, n_pairs, k, x, y_slots] {
      const std::vector<int64_t> rows(pairs, pairs + n_pairs);
      compute_pairs(s, *expert, x, k, rows.data(), n_pairs, y_slots);
    });
  }

  void weighted_sum(const float* y_slots, const float* weights, int64_t n_tokens, int32_t k,
                    int64_t n_embd, float* out, Stream& stream) override {
    stream.host_fn([y_slots, weights, n_tokens, k, n_embd, out] {
      ::ferry::weighted_sum(n_tokens, k, n_embd, y_slots, weights, out);
    });
  }

  void scatter_rows(float* y_slots, const float* rows, const int32_t* idx, int64_t n,
                    int64_t n_embd, Stream& stream) override {
    stream.host_fn([y_slots, rows, idx, n, n_embd] { scatter(y_slots, rows, idx, n, n_embd); });
  }

  void scatter_rows(float* y_slots, const float* rows, const RowIndex& idx, int64_t n,
                    int64_t n_embd, Stream& stream) override {
    stream.host_fn(
        [y_slots, rows, idx, n, n_embd] { scatter(y_slots, rows, idx.i, n, n_embd); });
  }

 private:
  static void scatter(float* y_slots, const float* rows, const int32_t* idx, int64_t n,
                      int64_t n_embd) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(y_slots + int64_t{idx[i]} * n_embd, rows + i * n_embd,
                  static_cast<size_t>(n_embd) * sizeof(float));
  }
  // Decode: the slots whose w[j].gate is set through compute_decode (each slot's expert alone,
  // the CPU executor's decode rows).
  static void decode(const ExpertShape& s, std::span<const ExpertPtrs> w, const float* x,
                     float* y_slots) {
    std::vector<uint8_t> compute(w.size(), 0);
    for (size_t j = 0; j < w.size(); ++j) compute[j] = w[j].gate != nullptr;
    compute_decode(s, x, w, compute, y_slots);
  }
};

}  // namespace

std::unique_ptr<DeviceExpertKernels> make_sim_expert_kernels() { return std::make_unique<SimExpertKernels>(); }

void DeviceExpertKernels::experts_decode_sum(const ExpertShape& s, const DecodeSlots& slots, int32_t k,
                                             const float* x, float* y_slots, const float* weights, float* out,
                                             Stream& stream) {
  experts_decode(s, slots, k, x, y_slots, stream);
  weighted_sum(y_slots, weights, 1, k, s.n_embd, out, stream);
}

void DeviceExpertKernels::weighted_sum_rows(float* y_slots, const float* rows, const RowIndex& idx, int64_t n_rows,
                                            const float* weights, int32_t k, int64_t n_embd, float* out,
                                            Stream& stream) {
  if (n_rows > 0) scatter_rows(y_slots, rows, idx, n_rows, n_embd, stream);
  weighted_sum(y_slots, weights, 1, k, n_embd, out, stream);
}

}  // namespace ferry
