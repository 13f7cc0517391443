#include "runtime/moe/cuda_resident.hpp"

#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/moe.cuh"
#include "runtime/moe/routing_log.hpp"
#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/cuda_ops.hpp"

namespace ferry {
namespace {

struct ResidentLayer {
  GgmlType t_gate_up = GgmlType::F32, t_down = GgmlType::F32;
  int64_t n_embd = 0, n_ff = 0;
  int32_t n_expert = 0;
  DeviceBuffer table;  // (n_expert) ExpertPtrs into the resident copies
};

class CudaMoeExecutor final : public MoeExecutor {
 public:
  CudaMoeExecutor(Ops& ops, const std::vector<MoeLayerWeights>& layers)
      : ops_(ops),
        dev_(cuda_ops_device(ops)),
        s_(static_cast<cudaStream_t>(cuda_ops_stream(ops))),
        stream_(cuda_stream_view(dev_, cuda_ops_stream(ops))),
        views_(layers) {
    layers_.reserve(layers.size());
    for (size_t l = 0; l < layers.size(); ++l)
      layers_.push_back(upload(layers[l], static_cast<int32_t>(l)));
  }

  // Resident experts: every step is device work on the ops stream, the routing log's copies too.
  bool capturable() const override { return true; }
  // Without observers: the routing log's copies are not the Ops' own calls (a replay would skip
  // them unseen), so observed steps are recorded every token instead.
  bool replayable() const override { return !observed(); }
  // A decode step's shared expert rides in the down launch (cuda::moe_down_sum's SharedDown) when
  // its down matrix has the routed experts' down type (as llama.cpp's quantization mixes give it).
  bool takes_shared_down(int32_t layer, int64_t n_tokens, GgmlType type, int64_t ff) const override {
    if (!cuda_ops_fusion(ops_) || n_tokens != 1 || layer < 0 || static_cast<size_t>(layer) >= layers_.size())
      return false;
    return type == layers_[static_cast<size_t>(layer)].t_down && ff > 0;
  }

  void begin_step(int64_t n_tokens) override {
    step_tokens_ = n_tokens;
    if (log_) log_->begin_step(n_tokens, *observers_);
  }
  void end_step(int64_t) override {
    if (log_) log_->end_step();
  }
  void drain() override {
    if (log_ && observers_) log_->flush(*observers_);
  }
  void set_observers(const ObserverSet* o) override {
    MoeExecutor::set_observers(o);
    log_.reset();
  }

  void run(const MoeStep& req) override {
    check_step(req, views_, "cuda moe");
    const ResidentLayer& L = layers_[static_cast<size_t>(req.layer)];
    if (req.n_tokens <= 0) return;
    // h: (n_tokens, top_k, n_ff) — grown when a larger step comes; the stream is drained first
    // because queued kernels may still read the old buffer.
    const size_t h_bytes = static_cast<size_t>(req.n_tokens) * static_cast<size_t>(req.top_k) *
                           static_cast<size_t>(L.n_ff) * sizeof(float);
    cuda_ops_grow(ops_, h_, h_bytes, "moe scratch");
    if (observed()) {
      if (!log_) {
        // Made at the first step, whose top_k sizes it (a model's first step always runs eagerly).
        log_ = std::make_unique<RoutingLog>(dev_, *stream_, static_cast<int32_t>(layers_.size()),
                                            req.top_k, L.n_embd);
        log_->begin_step(step_tokens_ > 0 ? step_tokens_ : req.n_tokens, *observers_);
      }
      log_->log(req);
    }
    // The kernels of the offload engine's device flow (one family, kernels/cuda/moe.cuh) over a
    // table that holds every expert: gate/up + SwiGLU, then per-slot down and the ordered weighted
    // sum in one launch (moe_down_sum: bit-identical to moe_down_slots + moe_sum).
    const auto* table = static_cast<const ExpertPtrs*>(L.table.data());
    if (cuda::moe_grouped_applies(req.n_tokens, L.n_expert) && cuda_ops_fusion(ops_) && !req.shared_down) {
      // A prompt batch: the pairs grouped by expert (moe_grouped_sum), so each expert's matrices
      // are read about once per 8 of its tokens; the same bits as the per-pair kernels below.
      const size_t pairs = static_cast<size_t>(req.n_tokens) * static_cast<size_t>(req.top_k);
      cuda_ops_grow(ops_, y_slots_, pairs * static_cast<size_t>(L.n_embd) * sizeof(float), "moe slot outputs");
      const size_t scratch = cuda::moe_grouped_scratch_bytes(static_cast<int64_t>(pairs), L.n_expert);
      cuda_ops_grow(ops_, group_, scratch, "moe expert groups");
      cuda::moe_grouped_sum(L.t_gate_up, L.t_down, table, L.n_expert, req.expert_ids, req.expert_weights, req.n_tokens,
                            req.top_k, L.n_embd, L.n_ff, req.x, h_.f32(), y_slots_.f32(), req.out, group_.data(),
                            group_.bytes(), s_);
      return;
    }
    cuda::moe_gate_up_swiglu(L.t_gate_up, table, req.expert_ids, req.n_tokens, req.top_k, L.n_embd,
                             L.n_ff, req.x, h_.f32(), s_);
    if (cuda_ops_fusion(ops_)) {
      cuda::SharedDown sh;
      if (req.shared_down) {
        if (!takes_shared_down(req.layer, req.n_tokens, req.shared_type, req.shared_ff))
          fail(ErrorKind::internal, "cuda moe: layer {}: a shared expert it did not take", req.layer);
        sh = {static_cast<const uint8_t*>(req.shared_down), req.shared_h, req.shared_ff, req.shared_out};
      }
      cuda::moe_down_sum(L.t_down, table, req.expert_ids, req.expert_weights, req.n_tokens, req.top_k,
                         L.n_embd, L.n_ff, h_.f32(), req.out, s_, req.shared_down ? &sh : nullptr);
      return;
    }
    // --cuda-no-fusion: the two launches, into per-slot outputs (n_tokens, top_k, n_embd).
    cuda_ops_grow(ops_, y_slots_,
                  static_cast<size_t>(req.n_tokens) * static_cast<size_t>(req.top_k) *
                      static_cast<size_t>(L.n_embd) * sizeof(float),
                  "moe slot outputs");
    cuda::moe_down_slots(L.t_down, table, req.expert_ids, req.n_tokens, req.top_k, L.n_embd, L.n_ff,
                         h_.f32(), y_slots_.f32(), s_);
    cuda::moe_sum(y_slots_.f32(), req.expert_weights, req.n_tokens, req.top_k, L.n_embd, req.out, s_);
  }

 private:
  // One 3-D tensor {n_in, n_out, n_expert} as a single (n_out·n_expert, n_in) weight: the experts
  // are back to back in the GGUF, so one resident copy holds them all.
  WeightView upload_tensor(const ExpertTensor& t, int32_t n_expert, int32_t layer,
                           const char* what) {
    const uint64_t expert_bytes =
        row_bytes(t.type, static_cast<uint64_t>(t.n_in)) * static_cast<uint64_t>(t.n_out);
    if (t.expert_stride_bytes != expert_bytes)
      fail(ErrorKind::unsupported,
           "cuda moe: layer {} {}: expert stride {} bytes, expected contiguous {}", layer, what,
           t.expert_stride_bytes, expert_bytes);
    if (expert_bytes % 16 != 0)  // the kernels read every expert with 16-byte loads
      fail(ErrorKind::unsupported,
           "cuda moe: layer {} {}: {} bytes per expert is not a multiple of 16", layer, what,
           expert_bytes);
    return ops_.resident(WeightView{t.base, t.type, t.n_out * n_expert, t.n_in});
  }

  ResidentLayer upload(const MoeLayerWeights& w, int32_t layer) {
    if (w.gate.type != w.up.type)
      fail(ErrorKind::unsupported,
           "cuda moe: layer {}: gate ({}) and up ({}) experts of different types", layer,
           type_name(w.gate.type), type_name(w.up.type));
    if (w.gate.n_in != w.up.n_in || w.gate.n_out != w.up.n_out || w.down.n_in != w.gate.n_out ||
        w.down.n_out != w.gate.n_in)
      fail(ErrorKind::invalid_arg,
           "cuda moe: layer {}: expert shapes do not chain (gate {}x{}, up {}x{}, down {}x{})",
           layer, w.gate.n_out, w.gate.n_in, w.up.n_out, w.up.n_in, w.down.n_out, w.down.n_in);
    ResidentLayer L;
    L.t_gate_up = w.gate.type;
    L.t_down = w.down.type;
    L.n_embd = w.gate.n_in;
    L.n_ff = w.gate.n_out;
    L.n_expert = w.n_expert;
    const WeightView g = upload_tensor(w.gate, w.n_expert, layer, "ffn_gate_exps");
    const WeightView u = upload_tensor(w.up, w.n_expert, layer, "ffn_up_exps");
    const WeightView d = upload_tensor(w.down, w.n_expert, layer, "ffn_down_exps");
    std::vector<ExpertPtrs> host(static_cast<size_t>(w.n_expert));
    for (int32_t e = 0; e < w.n_expert; ++e) {
      host[static_cast<size_t>(e)].gate =
          static_cast<const uint8_t*>(g.data) + e * w.gate.expert_stride_bytes;
      host[static_cast<size_t>(e)].up =
          static_cast<const uint8_t*>(u.data) + e * w.up.expert_stride_bytes;
      host[static_cast<size_t>(e)].down =
          static_cast<const uint8_t*>(d.data) + e * w.down.expert_stride_bytes;
    }
    L.table = dev_.alloc(host.size() * sizeof(ExpertPtrs), "expert table");
    FERRY_CUDA_CHECK(cudaMemcpyAsync(L.table.data(), host.data(),
                                     host.size() * sizeof(ExpertPtrs), cudaMemcpyHostToDevice,
                                     s_));
    FERRY_CUDA_CHECK(cudaStreamSynchronize(s_));
    return L;
  }

  Ops& ops_;
  Device& dev_;
  cudaStream_t s_;
  std::vector<ResidentLayer> layers_;
  std::unique_ptr<Stream> stream_;      // a view of the ops stream (the routing log's copies)
  std::vector<MoeLayerWeights> views_;  // host views of the experts (shapes, step checks)
  DeviceBuffer h_;                      // (n_tokens, top_k, n_ff) gate/up output
  DeviceBuffer y_slots_;                // per-slot down outputs (unfused, and grouped prefill steps)
  DeviceBuffer group_;                  // a grouped step's tiles and pair order (moe_grouped_sum)
  std::unique_ptr<RoutingLog> log_;     // with observers
  int64_t step_tokens_ = 0;             // of the forward step begin_step announced
};

}  // namespace

std::unique_ptr<MoeExecutor> make_cuda_resident_executor(
    Ops& ops, const std::vector<MoeLayerWeights>& layers) {
  return std::make_unique<CudaMoeExecutor>(ops, layers);
}

}  // namespace ferry

#else

namespace ferry {

std::unique_ptr<MoeExecutor> make_cuda_resident_executor(Ops&,
                                                         const std::vector<MoeLayerWeights>&) {
  fail(ErrorKind::unsupported,
       "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}

}  // namespace ferry

#endif
