#pragma once
// The MoE step: the narrow interface between the model (which knows the architecture) and the
// executors of routed experts (which know where each expert lives). The model computes routing;
// an MoeExecutor computes Σ_k w_k · down_e(silu(gate_e·x) ⊙ up_e·x) for the routed experts of
// every token. Shared experts are NOT part of this step (dense, always resident, done by the
// model).
//
// Every pointer of a step is memory of the model's backend: host memory on the CPU backend (and
// on the sim device, whose "device memory" is host memory), device memory on CUDA. An executor
// that needs the routing on the host fetches it itself; nothing in front of it copies.
//
// Observers (routing statistics, traces, recorders, the bench's weight-traffic tap) watch the
// routing an executor already has: the executor reports each step's routing to its ObserverSet,
// during the step where the routing is on the host, or later from a device routing log. They can
// never change which path runs or what is computed.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/core/types.hpp"

namespace ferry {

// Where one layer's routed expert weights are (the GGUF mapping, pinned copies, device copies):
// 3-D tensors {n_in, n_out, n_expert}; expert e's matrix starts at base + e·expert_stride_bytes.
struct ExpertTensor {
  const uint8_t* base = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;   // columns (ne0)
  int64_t n_out = 0;  // rows (ne1)
  uint64_t expert_stride_bytes = 0;
  // rows16: each expert's matrix in the CPU's interleaved layout (kernels/cpu/rows16.hpp); only
  // MoeCpuExecutor reads such a tensor.
  WeightLayout layout = WeightLayout::file;
};

struct MoeLayerWeights {
  ExpertTensor gate, up;  // {n_embd, n_ff_exp, n_expert}
  ExpertTensor down;      // {n_ff_exp, n_embd, n_expert}
  int32_t n_expert = 0;
};

struct MoeStep {
  int32_t layer = 0;
  int32_t n_tokens = 0;
  int32_t n_embd = 0;
  int32_t top_k = 0;
  const float* x = nullptr;               // (n_tokens, n_embd) normalized input
  const int32_t* expert_ids = nullptr;    // (n_tokens, top_k)
  const float* expert_weights = nullptr;  // (n_tokens, top_k), already renormalised
  float* out = nullptr;                   // (n_tokens, n_embd) overwritten with the routed sum
  // The shared expert's down projection, handed to the executor only when it said it takes it
  // (MoeExecutor::takes_shared_down): shared_out = W·shared_h per token, W (n_embd, shared_ff) of
  // shared_type at shared_down. The resident CUDA executor runs it in its down launch; others
  // leave the shared expert to the model.
  const void* shared_down = nullptr;
  GgmlType shared_type = GgmlType::F32;
  int64_t shared_ff = 0;
  const float* shared_h = nullptr;  // (n_tokens, shared_ff)
  float* shared_out = nullptr;      // (n_tokens, n_embd)
};

// One step's routing as an observer sees it: host memory, valid during the call.
struct RoutingView {
  int32_t layer = 0, n_tokens = 0, top_k = 0, n_embd = 0;
  const int32_t* ids = nullptr;    // (n_tokens, top_k)
  const float* weights = nullptr;  // (n_tokens, top_k)
  const float* x = nullptr;        // (n_tokens, n_embd); null where it is not on the host
  // true: reported while the step runs (on_step_end follows); false: read back from a device
  // routing log after the forward step (no timing).
  bool live = true;
};

class MoeObserver {
 public:
  virtual ~MoeObserver() = default;
  virtual void on_routing(const RoutingView& r) = 0;
  // After the step whose routing was reported live.
  virtual void on_step_end(int32_t layer) { (void)layer; }
  // An observer that reads RoutingView::x (the --stats predictor): executors whose routing log
  // would not carry x otherwise log it too.
  virtual bool wants_x() const { return false; }
};

// The observers of one model; not owned. Executors report to it; an empty set costs one branch.
class ObserverSet {
 public:
  void add(MoeObserver* o) { list_.push_back(o); }
  bool empty() const { return list_.empty(); }
  bool wants_x() const;
  void routing(const RoutingView& r) const {
    for (MoeObserver* o : list_) o->on_routing(r);
  }
  void step_end(int32_t layer) const {
    for (MoeObserver* o : list_) o->on_step_end(layer);
  }
  // The host-routed report of a step: its routing, live.
  void routing(const MoeStep& s) const;

 private:
  std::vector<MoeObserver*> list_;
};

class MoeExecutor {
 public:
  virtual ~MoeExecutor() = default;
  virtual void run(const MoeStep& step) = 0;
  // Whether run() would also compute a shared expert's down projection of this type and width
  // for a step of n_tokens of this layer (MoeStep::shared_down), in a launch it runs anyway.
  virtual bool takes_shared_down(int32_t layer, int64_t n_tokens, GgmlType type, int64_t ff) const {
    (void)layer, (void)n_tokens, (void)type, (void)ff;
    return false;
  }
  // True when run() only enqueues device work on the backend's stream (no host synchronisation, no
  // allocation, no host-side decision on the routing), so a step can be recorded as a CUDA graph.
  virtual bool capturable() const { return false; }
  // True when, besides, a one-token step's device work and its arguments are the same every token
  // (the routing lives in device memory; nothing of it is decided on the host), so that a step
  // graph recorded once can be replayed as it is (Ops::begin_graph).
  virtual bool replayable() const { return false; }
  // Called by the forward around each forward step (all layers of n_tokens tokens), eagerly:
  // never inside a recorded CUDA graph. Executors that keep host state in step with device work
  // queued without synchronising (device routing logs, decode tables) do their bookkeeping here.
  virtual void begin_step(int64_t n_tokens) { (void)n_tokens; }
  virtual void end_step(int64_t n_tokens) { (void)n_tokens; }
  // End of a run: waits for work in flight and reports routing not yet reported.
  virtual void drain() {}
  // Where the executor reports routing (may be null: nobody observes). Set before the first step.
  virtual void set_observers(const ObserverSet* o) { observers_ = o; }

 protected:
  bool observed() const { return observers_ && !observers_->empty(); }
  const ObserverSet* observers_ = nullptr;
};

}  // namespace ferry

namespace ferry {

// The checks every executor makes of a step (ErrorKind::internal: a step the forward should never
// produce): the layer within the executor's layers, the width that layer's experts take, top_k ≥ 1
// and n_tokens ≥ 0. check_step_ids also reads every expert id (host routing only).
void check_step(const MoeStep& s, const std::vector<MoeLayerWeights>& layers, const char* who);
void check_step_ids(const MoeStep& s, int32_t n_expert, const char* who);

}  // namespace ferry
