#pragma once
// The routing of device-routed MoE steps, for observers, without a host synchronisation per layer.
//
// During a forward step each layer's expert ids and weights (and, for one-token steps when an
// observer wants it, x) are copied on the compute stream into a device log — plain stream-ordered
// device copies, so a step recorded as a CUDA graph records them too. end_step() queues one
// asynchronous copy of the whole log into pinned host memory and records an event; the next
// begin_step() (or flush()) waits for that event — normally long passed: the forward read its
// logits after it — and reports the step's layers to the observers, one forward step late.
//
// Layout of one step's log (device and pinned host alike), layer l at l · stride, where stride =
// the step's per-layer bytes rounded up to 256 (so a decode step's log is a few KB):
//   ids     (n_tokens, top_k) int32
//   weights (n_tokens, top_k) float
//   x       (n_embd) float, one-token steps only when an observer wants x
// The buffers grow to the largest step seen (at least 64 tokens' worth).
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/moe/step.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {

class RoutingLog {
 public:
  // `stream`: the stream the steps run on (not owned; outlives the log).
  RoutingLog(Device& dev, Stream& stream, int32_t n_layer, int32_t top_k, int64_t n_embd);
  // Reports the previous step (if any) to `obs`, then makes room for n_tokens (eager: may
  // allocate; never call inside a recorded step).
  void begin_step(int64_t n_tokens, const ObserverSet& obs);
  // Copies the step's routing (device pointers) into the log, on the stream.
  void log(const MoeStep& s);
  // One copy of the logged layers to the host, and its event.
  void end_step();
  // Reports what is pending (waits for its copy).
  void flush(const ObserverSet& obs);
  uint64_t device_bytes() const { return dev_buf_.bytes(); }

 private:
  size_t stride() const;
  Device& dev_;
  Stream& s_;
  int32_t n_layer_, top_k_;
  int64_t n_embd_;
  int64_t n_tokens_ = 0;  // of the step being logged
  bool with_x_ = false;   // this step logs x
  DeviceBuffer dev_buf_;
  HostBuffer host_buf_;
  std::unique_ptr<Event> copied_;
  std::vector<uint8_t> logged_;  // (n_layer) layers the step logged
  bool pending_ = false;         // a step's copy is queued and not yet reported
};

}  // namespace ferry
