#include "offload/device_experts.hpp"

#include <algorithm>
#include <vector>

namespace ferry {
namespace {

// y_t += w · expert(x_t), the expert computed by the CPU code into tmp (n_embd floats).
void add_expert(const ExpertShape& s, const ExpertPtrs3& expert, const float* x_t, float w, float* y_t,
                std::vector<float>& tmp) {
  const uint8_t one = 1;
  compute_decode(s, x_t, std::span<const ExpertPtrs3>(&expert, 1), std::span<const uint8_t>(&one, 1), tmp.data());
  for (int64_t d = 0; d < s.n_embd; ++d) y_t[d] += w * tmp[static_cast<size_t>(d)];
}

// The sim "kernels": the CPU expert code, run on the sim stream's worker in stream order. The
// pointers are sim-arena (host) memory that stays valid until the stream has run this work.
class SimExpertKernels final : public DeviceExpertKernels {
 public:
  void experts(const ExpertShape& s, const ExpertPtrs3* table, const int32_t* ids, const float* weights,
               int64_t n_tokens, int32_t k, const float* x, float* y, bool accumulate, Stream& stream) override {
    stream.host_fn([s, table, ids, weights, n_tokens, k, x, y, accumulate] {
      const int64_t E = s.n_embd;
      std::vector<float> tmp(static_cast<size_t>(E));
      for (int64_t t = 0; t < n_tokens; ++t) {
        float* yt = y + t * E;
        if (!accumulate) std::fill(yt, yt + E, 0.0f);
        for (int32_t j = 0; j < k; ++j)
          if (const int32_t id = ids[t * k + j]; id >= 0) add_expert(s, table[id], x + t * E, weights[t * k + j], yt, tmp);
      }
    });
  }

  void expert_pairs(const ExpertShape& s, const ExpertPtrs3* expert, const int32_t* pairs, int64_t n_pairs,
                    const float* weights, int32_t k, const float* x, float* y, Stream& stream) override {
    stream.host_fn([s, expert, pairs, n_pairs, weights, k, x, y] {
      const int64_t E = s.n_embd;
      std::vector<float> tmp(static_cast<size_t>(E));
      for (int64_t p = 0; p < n_pairs; ++p) {
        const int64_t t = pairs[p] / k;
        add_expert(s, *expert, x + t * E, weights[pairs[p]], y + t * E, tmp);
      }
    });
  }

  void add(float* y, const float* b, int64_t n, Stream& stream) override {
    stream.host_fn([y, b, n] {
      for (int64_t i = 0; i < n; ++i) y[i] += b[i];
    });
  }
};

}  // namespace

std::unique_ptr<DeviceExpertKernels> make_sim_expert_kernels() { return std::make_unique<SimExpertKernels>(); }

}  // namespace ferry
