#include "offload/device_experts.hpp"

#include <algorithm>
#include <vector>

namespace ferry {
namespace {

// The sim "kernels": the CPU expert code, run on the sim stream's worker in stream order. The
// pointers are sim-arena (host) memory that stays valid until the stream has run this work.
class SimExpertKernels final : public DeviceExpertKernels {
 public:
  void experts(const ExpertShape& s, const ExpertPtrs3* table, const int32_t* ids, const float* weights,
               int64_t n_tokens, int32_t k, const float* x, float* y, bool accumulate, Stream& stream) override {
    stream.host_fn([s, table, ids, weights, n_tokens, k, x, y, accumulate] {
      const int64_t E = s.n_embd;
      std::vector<float> tmp(static_cast<size_t>(E));
      const uint8_t one = 1;
      for (int64_t t = 0; t < n_tokens; ++t) {
        float* yt = y + t * E;
        if (!accumulate) std::fill(yt, yt + E, 0.0f);
        for (int32_t j = 0; j < k; ++j) {
          const int32_t id = ids[t * k + j];
          if (id < 0) continue;
          compute_decode(s, x + t * E, std::span<const ExpertPtrs3>(table + id, 1),
                         std::span<const uint8_t>(&one, 1), tmp.data());
          const float w = weights[t * k + j];
          for (int64_t d = 0; d < E; ++d) yt[d] += w * tmp[static_cast<size_t>(d)];
        }
      }
    });
  }

  void expert_pairs(const ExpertShape& s, const ExpertPtrs3* expert, const int32_t* pairs, int64_t n_pairs,
                    const float* weights, int32_t k, const float* x, float* y, Stream& stream) override {
    stream.host_fn([s, expert, pairs, n_pairs, weights, k, x, y] {
      const int64_t E = s.n_embd;
      std::vector<float> tmp(static_cast<size_t>(E));
      const uint8_t one = 1;
      for (int64_t p = 0; p < n_pairs; ++p) {
        const int64_t t = pairs[p] / k;
        compute_decode(s, x + t * E, std::span<const ExpertPtrs3>(expert, 1), std::span<const uint8_t>(&one, 1),
                       tmp.data());
        const float w = weights[pairs[p]];
        for (int64_t d = 0; d < E; ++d) y[t * E + d] += w * tmp[static_cast<size_t>(d)];
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
