#pragma once
// The MoE step: the narrow interface between the model (which knows the architecture) and the
// offload layer (which knows where each expert lives). The model computes routing; an MoeExecutor
// computes Σ_k w_k · down_e(silu(gate_e·x) ⊙ up_e·x) for the routed experts of every token.
// Shared experts are NOT part of this step (they are dense, always resident, done by the model).
#include <cstdint>
#include <memory>

#include "runtime/core/types.hpp"

namespace ferry {

// Where one layer's routed expert weights are in host memory (the GGUF mapping, or pinned copies):
// 3-D tensors {n_in, n_out, n_expert}; expert e's matrix starts at base + e·expert_stride_bytes.
struct ExpertTensor {
  const uint8_t* base = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;    // columns (ne0)
  int64_t n_out = 0;   // rows (ne1)
  uint64_t expert_stride_bytes = 0;
};

struct MoeLayerWeights {
  ExpertTensor gate, up;  // {n_embd, n_ff_exp, n_expert}
  ExpertTensor down;      // {n_ff_exp, n_embd, n_expert}
  int32_t n_expert = 0;
};

// A request from a GPU backend after its host bridge (runtime/backend/cuda_moe_bridge.hpp): the
// MoeRequest's x, expert_ids and expert_weights are host copies (decorators may replace the
// routing), `out` stays device memory, and this holds the device originals. The bridge costs one
// host synchronisation per MoE step; an executor that decides per expert where to compute (the
// offload engine) needs the routing on the host anyway.
struct MoeDeviceIo {
  const float* x = nullptr;               // (n_tokens, n_embd) device
  const int32_t* expert_ids = nullptr;    // (n_tokens, top_k) device, the router's choice
  const float* expert_weights = nullptr;  // (n_tokens, top_k) device
  // steady_clock nanoseconds when the routing reached the host: the GPU has nothing queued from
  // here until the executor enqueues the step's work (its "sync" idle time).
  int64_t ready_ns = 0;
};

struct MoeRequest {
  int32_t layer = 0;
  int32_t n_tokens = 0;
  int32_t n_embd = 0;
  int32_t top_k = 0;
  const float* x = nullptr;            // (n_tokens, n_embd) normalized input
  const int32_t* expert_ids = nullptr; // (n_tokens, top_k)
  const float* expert_weights = nullptr;  // (n_tokens, top_k), already renormalised
  float* out = nullptr;                // (n_tokens, n_embd) overwritten with the routed sum
  const MoeDeviceIo* device = nullptr;  // set by a GPU backend's bridge; null: all host memory
};

class MoeExecutor {
 public:
  virtual ~MoeExecutor() = default;
  virtual void run(const MoeRequest& req) = 0;
  // True when run() only enqueues device work on the ops stream (no host synchronisation, no
  // allocation, no host-side decision on the routing), so a step can be recorded as a CUDA graph.
  virtual bool capturable() const { return false; }
  // True when run() takes a request of n_tokens whose routing is still in device memory (a GPU
  // forward's own buffers, MoeRequest::device null) without a host synchronisation: a GPU
  // backend's host bridge then passes it through instead of copying the routing to the host.
  virtual bool device_routing(int32_t n_tokens) const {
    (void)n_tokens;
    return false;
  }
  // Called by the forward around each forward step (all layers of n_tokens tokens), eagerly:
  // never inside a recorded CUDA graph. An executor that keeps host state in step with device
  // work it queued without synchronising (the offload engine's device tables) does its host-side
  // bookkeeping here. Wrappers forward both to the executor they wrap.
  virtual void before_step(int64_t n_tokens) { (void)n_tokens; }
  virtual void after_step(int64_t n_tokens) { (void)n_tokens; }
};

// A decorator of another executor (routing overrides, taps, the GPU host bridge): owns it and
// forwards the step hooks to it.
class MoeWrapper : public MoeExecutor {
 public:
  explicit MoeWrapper(std::unique_ptr<MoeExecutor> inner) : inner_(std::move(inner)) {}
  void before_step(int64_t n_tokens) override { inner_->before_step(n_tokens); }
  void after_step(int64_t n_tokens) override { inner_->after_step(n_tokens); }

 protected:
  std::unique_ptr<MoeExecutor> inner_;
};

}  // namespace ferry
