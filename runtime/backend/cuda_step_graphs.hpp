#pragma once
// CudaOps' step graphs (Ops::begin_graph .. end_graph; docs/decisions/0005-cuda-ops.md): a
// one-token step recorded as a CUDA graph and launched as one.
//
// - A replayable step (Ops::begin_graph's `replayable`) is first run on the host with its launches
//   and copies folded into a fingerprint instead of enqueued (cuda::detail::StepFold,
//   kernels/cuda/step_fold.hpp). A graph recorded for the same fingerprint is launched as it is:
//   no capture, no update. Its kernels read the token's position from device memory (attention's
//   p0_dev) and its inputs from the staging, which the host run fills exactly as the recording
//   did. A miss (the first token; a new attention plan, kernels/cuda/attention.cuh
//   attention_plan_keys) asks for a recording (retry()), kept under its fingerprint.
// - Other steps are recorded anew every token and applied to one executable graph with
//   cudaGraphExecUpdate, which keeps it when only arguments changed.
// - With segments, a step is several graphs: pause() launches what was recorded so far (one
//   executable graph per segment index) so that a MoE executor that synchronises with the host
//   runs eagerly in between.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/step_fold.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {

class CudaStepGraphs {
 public:
  // `stream` is the Ops' compute stream (a CUDA stream of `dev`); both outlive this.
  CudaStepGraphs(Device& dev, Stream& stream, bool on, bool segments);
  ~CudaStepGraphs();
  CudaStepGraphs(const CudaStepGraphs&) = delete;
  CudaStepGraphs& operator=(const CudaStepGraphs&) = delete;

  CudaGraphStats stats() const {
    return {launches_, instantiations_, on_, replays_, replay_misses_};
  }
  void set_on(bool on) {
    on_ = on;
    warmup_ = on ? 1 : 0;
  }

  // Ops::begin_graph .. disable_graphs, as CudaOps forwards them.
  bool begin(bool segmented, bool replayable);
  bool end();
  bool retry() const { return retry_; }
  void pause();
  void resume();
  bool partially_ran() const { return partial_; }
  void abort();
  void disable(const char* why) {
    if (on_) off(why);
  }

  // Inside a recording: the Ops' copies. A graph reads its copy's source when it runs, after the
  // caller's (pageable) buffer is gone: the bytes go to pinned staging that lives as long as the
  // graph's launch.
  bool recording() const { return recording_; }
  void to_device(void* dst, const void* src, size_t bytes);
  void fill_zero(void* dst, size_t bytes);

 private:
  struct Replayable {
    cudaGraphExec_t exec = nullptr;
    uint64_t kernels = 0, last_use = 0;
  };
  static constexpr size_t kMaxReplayGraphs = 8;  // a context's attention plans change one at a time

  void fold_copy(const void* dst, size_t staging_at, size_t bytes);
  bool launch_replay();
  bool finish_replayable();
  bool finish_segment();
  cudaGraph_t end_capture();
  bool apply_segment(cudaGraph_t graph);
  void launch_exec(cudaGraphExec_t exec);
  void off(const char* why);

  Device& dev_;
  Stream& stream_;
  cudaStream_t s_ = nullptr;
  bool on_ = false, segments_on_ = false, recording_ = false, paused_ = false;
  bool partial_ = false;  // a segment of the current step has been launched
  int warmup_ = 1;        // the first step runs eagerly: lazily grown buffers get allocated
  size_t segment_ = 0;
  std::vector<cudaGraphExec_t> execs_;  // one per segment index of a recorded-every-token step
  HostBuffer staging_;
  size_t staging_used_ = 0;
  std::unique_ptr<Event> done_;  // after the last launch: the staging is reused once it has passed
  uint64_t launches_ = 0, instantiations_ = 0;
  // Replayed graphs by fingerprint, each with its kernel count (kernels_launched on a GPU).
  std::unordered_map<uint64_t, Replayable> replayable_;
  cuda::detail::StepFold fold_;
  bool folding_ = false, replaying_ = false, retry_ = false;
  bool replay_ok_ = true;  // off for good once a recording held calls the fold did not see
  uint64_t tick_ = 0, replays_ = 0, replay_misses_ = 0;
};

}  // namespace ferry
