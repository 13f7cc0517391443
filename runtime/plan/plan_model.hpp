#pragma once
// What `ferry plan` and `ferry simulate` know of a model without running it: its bytes (every
// tensor, routed experts, dense part), the session's KV cache, recurrent state and workspace for a
// context — computed by the code the session and the offload placement use (placement_input,
// state_footprint), never re-derived — and the simulator's description of it (SimModel).
// The model is a GGUF file, or a synthetic one described without its data (gguf::File::describe
// from runtime/synth's plan: the same tensor table `ferry synth` would write).
#include <cstdint>
#include <string>

#include "offload/simulate.hpp"
#include "runtime/core/types.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry {

struct PlanRequest {
  int64_t n_ctx = 0;  // 0: the session's default, min(trained context, 4096)
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;
  int32_t n_batch = 512;
  int32_t n_parallel = 1;  // -np: sequences sharing the context; each has its own recurrent state
};

struct ModelSizes {
  std::string name, arch;
  uint64_t weights_bytes = 0;  // every tensor's bytes (the file's tensor data)
  uint64_t expert_bytes = 0;   // routed experts, every layer
  uint64_t dense_bytes = 0;    // the rest (what the GPU holds besides expert slots)
  int64_t n_params = 0;
  int64_t n_ctx = 0;
  int64_t n_ctx_train = 0;
  uint64_t kv_bytes = 0;         // the session's KV cache for n_ctx (all sequences)
  uint64_t state_bytes = 0;      // recurrent state (× n_parallel)
  uint64_t workspace_bytes = 0;  // the forward's workspace for n_batch
  uint64_t step_bytes = 0;       // the offload device step's buffers (placement.hpp)
  SimModel sim;                  // for the simulator; sim.placement is the engine's input
};

// ErrorKind::invalid_arg for a bad request (n_ctx < 1 after defaults, n_parallel < 1); the
// config's and the state's own errors otherwise.
ModelSizes model_sizes(const gguf::File& f, const PlanRequest& r);

}  // namespace ferry
