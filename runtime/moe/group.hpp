#pragma once
// The two primitives every MoE executor composes (vLLM's moe_align_block_size and moe_sum):
//   group_by_expert  the step's (token, slot) pairs grouped by expert, tokens in order within a
//                    group (a counting sort), so each expert's weights are read once per group;
//   weighted_sum     out[t] = Σ_s y[t][s] · w[t][s], slots added in order 0..k-1 — the order of
//                    llama.cpp's ggml graph, which makes the CPU executor bit-exact against it and
//                    every executor that sums per-slot outputs through here bit-identical to it.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry {

struct ExpertGroups {
  std::vector<int64_t> start;  // (n_expert + 1) group offsets into pairs
  std::vector<int64_t> pairs;  // (n_tokens · top_k) flat t·top_k + s, grouped by expert
  int64_t size(int32_t e) const {
    return start[static_cast<size_t>(e) + 1] - start[static_cast<size_t>(e)];
  }
  const int64_t* group(int32_t e) const { return pairs.data() + start[static_cast<size_t>(e)]; }
};

// ids: (n_pairs) expert ids, each in [0, n_expert) (the caller validated them).
ExpertGroups group_by_expert(const int32_t* ids, int64_t n_pairs, int32_t n_expert);

// y: (n_tokens, top_k, n_embd) per-slot expert outputs; w: (n_tokens, top_k); out: (n_tokens,
// n_embd). Parallel over tokens (oneTBB) when n_tokens > 1; the sum order never changes.
void weighted_sum(int64_t n_tokens, int32_t top_k, int64_t n_embd, const float* y, const float* w,
                  float* out);

}  // namespace ferry
