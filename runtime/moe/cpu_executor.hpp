#pragma once
// The CPU MoE executor: routed experts computed on the host from their GGUF (or pinned) weights
// with kernels/cpu, parallel with oneTBB.
//   decode (1 token):  the k selected experts' matrices are small (768×2048 for Qwen3-30B-A3B), so
//                      one parallel loop runs over (expert × row block) for gate+up, then another
//                      over (expert × row block) for down — all cores busy on 8 small matrices.
//   prefill (n > 1):   tokens are grouped by expert and each used expert runs one small-batch
//                      product over its group, so its weights are read once per group.
// x is quantized once per token (to the weights' activation type) and reused by gate and up.
// Reports each step's routing to its observers before computing it.
// Thread-safe: run() keeps no state between calls.
#include <vector>

#include "runtime/moe/step.hpp"

namespace ferry {

class MoeCpuExecutor final : public MoeExecutor {
 public:
  // ErrorKind::format when a layer's gate/up/down shapes disagree with each other.
  explicit MoeCpuExecutor(std::vector<MoeLayerWeights> layers);
  void run(const MoeStep& req) override;

 private:
  void run_decode(const MoeStep& req, const MoeLayerWeights& L);
  void run_grouped(const MoeStep& req, const MoeLayerWeights& L);
  std::vector<MoeLayerWeights> layers_;
};

}  // namespace ferry
