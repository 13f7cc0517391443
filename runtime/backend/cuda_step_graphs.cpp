// Compiled with the CUDA backend only (its header needs the CUDA runtime).
#if FERRY_HAVE_CUDA
#include "runtime/backend/cuda_step_graphs.hpp"

#include <cstring>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch_count.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace ferry {

CudaStepGraphs::CudaStepGraphs(Device& dev, Stream& stream, bool on, bool segments)
    : dev_(dev), stream_(stream), s_(static_cast<cudaStream_t>(stream.native_handle())), on_(on),
      segments_on_(segments) {}

CudaStepGraphs::~CudaStepGraphs() {
  if (cuda::detail::step_fold == &fold_) cuda::detail::step_fold = nullptr;
  for (cudaGraphExec_t e : execs_)
    if (e) (void)cudaGraphExecDestroy(e);
  for (auto& [hash, r] : replayable_) (void)cudaGraphExecDestroy(r.exec);
}

bool CudaStepGraphs::begin(bool segmented, bool replayable) {
  if (!on_ || (segmented && !segments_on_)) return false;
  if (warmup_ > 0) {
    --warmup_;
    return false;
  }
  if (!staging_.data()) staging_ = dev_.alloc_host(64 << 10, true);
  // The last graph no longer reads the staging (normally long done: its logits were read).
  if (done_ && !done_->query()) done_->synchronize();
  segment_ = 0;
  staging_used_ = 0;
  partial_ = false;
  folding_ = replayable && !segmented && replay_ok_;
  replaying_ = folding_ && !retry_;  // a retry records
  retry_ = false;
  if (folding_) {
    fold_ = cuda::detail::StepFold{};
    fold_.launch = !replaying_;
    cuda::detail::step_fold = &fold_;
  }
  if (!replaying_) FERRY_CUDA_CHECK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
  recording_ = true;
  return true;
}

bool CudaStepGraphs::end() {
  if (!recording_) return false;
  const bool folded = folding_;
  if (folded) {
    cuda::detail::step_fold = nullptr;
    folding_ = false;
  }
  if (replaying_) return launch_replay();
  if (folded) return finish_replayable();
  return finish_segment();
}

void CudaStepGraphs::pause() {
  if (!recording_) return;
  if (!finish_segment())
    fail(ErrorKind::device,
         "cuda graphs: recording a step segment failed after {} segment(s) ran; "
         "--cuda-graphs off runs without graphs",
         segment_);
  ++segment_;
  paused_ = true;
}

void CudaStepGraphs::resume() {
  if (!paused_) return;
  paused_ = false;
  FERRY_CUDA_CHECK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
  recording_ = true;
}

void CudaStepGraphs::abort() {
  paused_ = false;
  if (!recording_) return;
  recording_ = false;
  cuda::detail::step_fold = nullptr;
  folding_ = false;
  if (replaying_) {  // nothing was captured
    replaying_ = false;
    return;
  }
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(s_, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void CudaStepGraphs::to_device(void* dst, const void* src, size_t bytes) {
  const size_t at = (staging_used_ + 15) / 16 * 16;
  if (at + bytes > staging_.bytes())
    fail(ErrorKind::internal, "cuda graph: {} bytes of step inputs exceed the {} staging", at + bytes,
         staging_.bytes());
  std::memcpy(static_cast<char*>(staging_.data()) + at, src, bytes);
  staging_used_ = at + bytes;
  if (folding_) fold_copy(dst, at, bytes);
  if (replaying_) return;  // the recorded graph's copy node reads the staging
  stream_.copy_h2d(dst, static_cast<char*>(staging_.data()) + at, bytes);
}

void CudaStepGraphs::fill_zero(void* dst, size_t bytes) {
  if (folding_) fold_copy(dst, SIZE_MAX, bytes);
  if (!replaying_) stream_.memset(dst, 0, bytes);
}

void CudaStepGraphs::fold_copy(const void* dst, size_t staging_at, size_t bytes) {
  fold_.value(dst);
  fold_.value(staging_at);
  fold_.value(bytes);
  ++fold_.copies;
}

// The host run of a replayable step is over: launch the graph recorded for its fingerprint, or
// ask for a recording (retry) when there is none.
bool CudaStepGraphs::launch_replay() {
  recording_ = false;
  replaying_ = false;
  const auto it = replayable_.find(fold_.hash);
  if (it == replayable_.end()) {
    retry_ = true;
    ++replay_misses_;
    // Steps that keep missing (more sessions than kept graphs, each with its own buffers) pay the
    // host run twice: past a quarter of misses they are recorded and updated every token instead.
    if (replay_misses_ > kMaxReplayGraphs && replay_misses_ * 4 > replays_ + replay_misses_) {
      replay_ok_ = false;
      log::info("cuda: step graphs are recorded every token ({} of {} replays missed)", replay_misses_,
                replays_ + replay_misses_);
    }
    return false;
  }
  it->second.last_use = ++tick_;
  launch_exec(it->second.exec);
  cuda::count_graph_kernels(it->second.kernels);
  ++replays_;
  return true;
}

// Ends the recording of a replayable step: a new executable graph under the step's fingerprint
// (past kMaxReplayGraphs the least recently used one goes), launched. A recording whose nodes are
// not exactly the folded calls (work another component enqueued on the stream, which a replay
// would skip unseen) turns replay off for good; such steps go the update way.
bool CudaStepGraphs::finish_replayable() {
  cudaGraph_t graph = end_capture();
  if (!graph) return false;
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess || nodes != fold_.kernels + fold_.copies) {
    (void)cudaGetLastError();
    replay_ok_ = false;
    log::info("cuda: step graphs are recorded every token ({} graph nodes, {} calls seen)", nodes,
              fold_.kernels + fold_.copies);
    return apply_segment(graph);
  }
  cudaGraphExec_t exec = nullptr;
  if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    off(cudaGetErrorString(e));
    return false;
  }
  (void)cudaGraphDestroy(graph);
  ++instantiations_;
  if (replayable_.size() >= kMaxReplayGraphs) {
    auto oldest = replayable_.begin();
    for (auto i = replayable_.begin(); i != replayable_.end(); ++i)
      if (i->second.last_use < oldest->second.last_use) oldest = i;
    (void)cudaGraphExecDestroy(oldest->second.exec);
    replayable_.erase(oldest);
  }
  replayable_[fold_.hash] = Replayable{exec, fold_.kernels, ++tick_};
  launch_exec(exec);
  return true;
}

// Ends the current recording and launches it as segment `segment_` of the step (updating that
// segment's executable graph, or instantiating it anew). False, with graphs off, when the
// recording or the instantiation failed: nothing of this segment ran.
bool CudaStepGraphs::finish_segment() {
  cudaGraph_t graph = end_capture();
  return graph && apply_segment(graph);
}

// Ends the recording's stream capture: its graph, or nullptr with graphs off.
cudaGraph_t CudaStepGraphs::end_capture() {
  recording_ = false;
  cudaGraph_t graph = nullptr;
  if (const cudaError_t e = cudaStreamEndCapture(s_, &graph); e != cudaSuccess) {
    off(cudaGetErrorString(e));
    return nullptr;
  }
  return graph;
}

// The recorded `graph` (owned from here) as segment `segment_`'s executable graph, launched.
bool CudaStepGraphs::apply_segment(cudaGraph_t graph) {
  if (execs_.size() <= segment_) execs_.resize(segment_ + 1, nullptr);
  cudaGraphExec_t& exec = execs_[segment_];
  if (exec) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
  }
  if (!exec) {
    if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
      exec = nullptr;
      (void)cudaGraphDestroy(graph);
      off(cudaGetErrorString(e));
      return false;
    }
    ++instantiations_;
  }
  (void)cudaGraphDestroy(graph);
  launch_exec(exec);
  return true;
}

void CudaStepGraphs::launch_exec(cudaGraphExec_t exec) {
  FERRY_CUDA_CHECK(cudaGraphLaunch(exec, s_));
  partial_ = true;
  if (!done_) done_ = dev_.create_event();
  stream_.record(*done_);
  ++launches_;
}

void CudaStepGraphs::off(const char* why) {
  (void)cudaGetLastError();
  on_ = false;
  log::warn("cuda: step graphs off ({}); steps run kernel by kernel", why);
}

}  // namespace ferry

#endif
