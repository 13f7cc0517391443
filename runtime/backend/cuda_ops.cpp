#include "runtime/backend/cuda_ops.hpp"

#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/hadamard.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_prep.cuh"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/fused.cuh"
#include "kernels/cuda/launch_count.hpp"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"
#include "runtime/backend/cuda_step_graphs.hpp"
#include "runtime/backend/gdn_cuda.hpp"
#include "runtime/core/log.hpp"

namespace ferry {
namespace {

class CudaOps final : public Ops {
 public:
  CudaOps(Device& dev, const CudaOpsOptions& o)
      : dev_(dev), stream_(dev.create_stream()), graphs_(dev, *stream_, o.graphs, o.graph_segments) {
    s_ = static_cast<cudaStream_t>(stream_->native_handle());
    pdl_ = o.pdl && cuda::set_pdl(true);
    if (o.pdl && !pdl_) log::warn("cuda ops: --cuda-pdl needs an sm_90 or newer device; launches stay plain");
    int8_dot_ = o.int8_dot;
    fusion_ = o.fusion;
    gdn_prefill_ = o.gdn_prefill;
    if (o.use_cublas) {
      std::string why;
      blas_ = cuda::Blas::try_load(&why);
      if (!blas_) log::warn("cuda ops: {}; large-batch matmuls use the tiled kernel", why);
    }
    route_counter_ = dev_.alloc(sizeof(unsigned), "route counter");
    stream_->memset(route_counter_.data(), 0, sizeof(unsigned));
    if (o.matmul_workspace_bytes) matmul_ws_ = dev_.alloc(o.matmul_workspace_bytes, "matmul workspace");
    if (o.attention_workspace_bytes) attn_ws_ = dev_.alloc(o.attention_workspace_bytes, "attention workspace");
    if (blas_) {
      // cuBLAS's own scratch comes out of the budget too (4 MiB covers its Hopper GEMMs).
      blas_ws_ = dev_.alloc(4ull << 20, "cuBLAS workspace");
      blas_->set_workspace(blas_ws_.data(), blas_ws_.bytes());
    }
  }

  BackendKind kind() const override { return BackendKind::cuda; }
  const char* name() const override { return "cuda"; }
  std::unique_ptr<GdnOps> make_gdn_ops() override { return make_cuda_gdn_ops(*this, gdn_prefill_); }
  cudaStream_t stream() const { return s_; }
  Device& device() const { return dev_; }
  uint64_t calls() const { return calls_; }
  bool fusion() const { return fusion_; }
  cpu::GdnPrefill gdn_prefill() const { return gdn_prefill_; }
  uint64_t workspace_bytes() const { return matmul_ws_.bytes() + attn_ws_.bytes() + blas_ws_.bytes(); }
  CudaGraphStats graph_stats() const { return graphs_.stats(); }
  void set_graphs(bool on) { graphs_.set_on(on); }

  ~CudaOps() override {
    if (pdl_) cuda::set_pdl(false);
  }

  // Step graphs: runtime/backend/cuda_step_graphs.hpp. A replayable step needs the fused decode
  // step: the unfused kernel-per-op path passes positions as arguments (kv_store).
  bool begin_graph(bool segmented, bool replayable) override {
    return graphs_.begin(segmented, replayable && fusion_);
  }
  bool end_graph() override { return graphs_.end(); }
  bool graph_retry() const override { return graphs_.retry(); }
  void pause_graph() override { graphs_.pause(); }
  void resume_graph() override { graphs_.resume(); }
  bool graph_partially_ran() const override { return graphs_.partially_ran(); }
  void abort_graph() override { graphs_.abort(); }
  void disable_graphs(const char* why) override { graphs_.disable(why); }

  DeviceBuffer alloc(size_t bytes) override { return dev_.alloc(bytes, "activations"); }
  void to_device(void* dst, const void* src_host, size_t bytes) override {
    ++calls_;
    if (graphs_.recording()) return graphs_.to_device(dst, src_host, bytes);
    stream_->copy_h2d(dst, src_host, bytes);
  }
  void to_host(void* dst_host, const void* src, size_t bytes) override {
    ++calls_;
    stream_->copy_d2h(dst_host, src, bytes);
    stream_->synchronize();
  }
  void fill_zero(void* dst, size_t bytes) override {
    ++calls_;
    if (graphs_.recording()) return graphs_.fill_zero(dst, bytes);
    stream_->memset(dst, 0, bytes);
  }
  void sync() override { stream_->synchronize(); }

  WeightView resident(const WeightView& host) override {
    std::lock_guard lock(mu_);
    // Keyed by the whole view, not only the pointer: the same bytes read as another type/shape get
    // a copy of their own. The copy lives as long as this Ops and is not compared with the host
    // bytes again: the caller's bytes must stay as they were (the model's mapped file), since
    // other bytes later put at the same address with the same view would get the old copy.
    const ResidentKey key{host.data, host.type, host.rows, host.cols};
    auto it = resident_.find(key);
    if (it == resident_.end()) {
      const uint64_t bytes = row_bytes(host.type, static_cast<uint64_t>(host.cols)) * static_cast<uint64_t>(host.rows);
      DeviceBuffer buf = dev_.alloc(bytes, "weights");
      // Synchronous: the source is an mmapped file page range the caller may unmap later.
      FERRY_CUDA_CHECK(cudaMemcpyAsync(buf.data(), host.data, bytes, cudaMemcpyHostToDevice, s_));
      FERRY_CUDA_CHECK(cudaStreamSynchronize(s_));
      it = resident_.emplace(key, std::move(buf)).first;
    }
    WeightView w = host;
    w.data = it->second.data();
    return w;
  }

  void embed(const WeightView& table, const int32_t* ids, int64_t n, float* dst) override {
    ++calls_;
    cuda::embed_rows(table.type, table.data, table.rows, table.cols, ids, n, dst, s_);
  }

  void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld, float eps,
               float* dst) override {
    ++calls_;
    cuda::rmsnorm(x, ld, w, dst, ld, n_rows, n, eps, s_);
  }

  void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy) override {
    ++calls_;
    if (n <= 0) return;
    // The kernels read activations with 16-byte vector loads; a view at an odd offset is packed
    // into the workspace first.
    if (!cuda::aligned(x, 16) || ldx % 4 != 0) {
      const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(w.cols) * sizeof(float);
      DeviceBuffer packed = dev_.alloc(bytes, "matmul packed activations");
      FERRY_CUDA_CHECK(cudaMemcpy2DAsync(packed.data(), w.cols * sizeof(float), x, ldx * sizeof(float),
                                         w.cols * sizeof(float), n, cudaMemcpyDeviceToDevice, s_));
      matmul(w, packed.f32(), w.cols, n, y, ldy);
      FERRY_CUDA_CHECK(cudaStreamSynchronize(s_));  // `packed` is freed on return
      return;
    }
    // F32 weights keep f32 GEMM inputs (they cost no dequantization and match the CPU to ~1e-14);
    // everything else runs the tensor-core f16 path for large batches.
    const auto prec = w.type == GgmlType::F32 ? cuda::GemmPrecision::f32 : cuda::GemmPrecision::f16;
    cuda::matmul(w.type, w.data, w.rows, w.cols, x, ldx, n, y, ldy, blas_.get(), matmul_ws_.data(),
                 matmul_ws_.bytes(), s_, prec, int8_dot_);
  }

  // Decode projections of one input: one matvec_multi launch for all of them, whatever their
  // weight types (split only beyond kMaxMatvecOuts targets); other batches, unaligned inputs and
  // the integer matvec take matmul per target.
  bool one_launch(std::span<const MatmulTarget> targets, const float* x, int64_t n) const {
    return fusion_ && n == 1 && !int8_dot_ && cuda::aligned(x, 16) &&
           std::all_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) {
             return t.w.cols == targets[0].w.cols && cuda::matvec_multi_supported(t.w.type) &&
                    (!t.up.data || (t.up.type == t.w.type && t.w.type != GgmlType::F32));
           });
  }
  // In chunks of kMaxMatvecOuts targets, described on the stack (a decode hot path).
  void launch_multi(std::span<const MatmulTarget> targets, const float* x, const cuda::RouteEpilogue* route) {
    for (size_t i = 0; i < targets.size(); i += cuda::kMaxMatvecOuts) {
      ++calls_;
      const size_t count = std::min<size_t>(cuda::kMaxMatvecOuts, targets.size() - i);
      std::array<cuda::MatvecOut, cuda::kMaxMatvecOuts> outs;
      for (size_t j = 0; j < count; ++j) {
        const MatmulTarget& t = targets[i + j];
        outs[j] = {t.w.type, t.w.data, t.w.rows, t.y, t.up.data};
      }
      const bool last = i + count == targets.size();  // routes after every target ran
      cuda::matvec_multi(outs.data(), static_cast<int>(count), targets[0].w.cols, x, last ? route : nullptr, s_);
    }
  }

  void matmul_multi(std::span<const MatmulTarget> targets, const float* x, int64_t ldx, int64_t n) override {
    if (!one_launch(targets, x, n)) {
      Ops::matmul_multi(targets, x, ldx, n);
      return;
    }
    launch_multi(targets, x, nullptr);
  }

  // The router's top-k in the projections' launch: its last block routes (cuda::RouteEpilogue).
  void matmul_multi_route(std::span<const MatmulTarget> targets, const float* x, int64_t ldx, int64_t n,
                          const RouteArgs& r) override {
    if (!one_launch(targets, x, n) || targets.size() > cuda::kMaxMatvecOuts) {
      Ops::matmul_multi_route(targets, x, ldx, n, r);
      return;
    }
    cuda::RouteEpilogue e;
    e.counter = static_cast<unsigned*>(route_counter_.data());
    e.logits = r.logits;
    e.n_expert = r.n_expert;
    e.k = r.top_k;
    e.ids = r.ids;
    e.weights = r.weights;
    e.renormalize = r.renormalize;
    e.scale = r.scale;
    launch_multi(targets, x, &e);
  }

  void residual_norm(float* x, int64_t n_tokens, int64_t n, const ResidualNorm& r) override {
    if (!fusion_) {
      Ops::residual_norm(x, n_tokens, n, r);
      return;
    }
    ++calls_;
    cuda::residual_norm(x, r.a, r.b, r.gate_logit, r.w, r.h, n_tokens, n, r.eps, s_);
  }

  void rope_neox(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride, int64_t head_stride,
                 int32_t n_rot, const int32_t* pos, float freq_base) override {
    ++calls_;
    cuda::rope_neox(x, n_tokens, static_cast<int>(n_head), n_rot, n_rot, token_stride, head_stride, pos, freq_base, s_);
  }

  // The nine KV cache types, K and V independently (kernels/cuda/kv_store.cu, attention.cu).
  bool kv_type_supported(GgmlType t) const override { return kv_cache_type_supported(t); }
  void check_kv_types(const KvLayerView& kv, const char* op) const {
    for (GgmlType t : {kv.type_k, kv.type_v})
      if (!kv_type_supported(t))
        fail(ErrorKind::unsupported, "cuda {}: KV cache type {} is not supported (use one of {})", op,
             type_name(t), kv_cache_type_names());
  }
  // A store of n_tokens rows at pos0: cache types this backend takes, rows inside the cache.
  void check_cache_rows(const KvLayerView& kv, int64_t pos0, int64_t n_tokens, const char* op) {
    check_kv_types(kv, op);
    if (!kv_types_seen_) {  // a model's layers share their cache types: decided at the first store
      kv_types_seen_ = true;
      if (type_info(kv.type_k).block_values > 1 || type_info(kv.type_v).block_values > 1)
        log::warn("cuda: the {}/{} KV cache's store does not match the CPU's bytes on an H100 "
                  "(bench/results/2026-12-05-gpu-check-h100.md): logits may drift from the CPU's; "
                  "f16/bf16 caches are exact", type_name(kv.type_k), type_name(kv.type_v));
    }
    if (pos0 < 0 || pos0 + n_tokens > kv.n_ctx)
      fail(ErrorKind::context, "{}: rows [{}, {}) outside the cache of {} positions", op, pos0, pos0 + n_tokens,
           kv.n_ctx);
  }

  // llama.cpp's Hadamard rotation of a quantized cache, sized as the CPU backend does
  // (kernels/cpu/hadamard.hpp), with the CPU's float scale 1/√n.
  static float rotation_scale(int32_t n) { return n > 0 ? 1.0f / std::sqrt(static_cast<float>(n)) : 1.0f; }
  static int32_t rot_k(const KvLayerView& kv) { return cpu::kv_rotation_k(type_info(kv.type_k).block_values > 1, kv.head_dim_k); }
  static int32_t rot_v(const KvLayerView& kv) { return cpu::kv_rotation_v(type_info(kv.type_v).block_values > 1, kv.head_dim_v); }

  void kv_store(const KvLayerView& kv, int64_t pos0, int64_t n_tokens, const float* k, const float* v) override {
    ++calls_;
    check_cache_rows(kv, pos0, n_tokens, "kv_store");
    const int64_t kw = int64_t{kv.n_head_kv} * kv.head_dim_k, vw = int64_t{kv.n_head_kv} * kv.head_dim_v;
    const int32_t nk = rot_k(kv), nv = rot_v(kv);
    cuda::kv_store(k, kw, kv.k, kv.type_k, pos0, n_tokens, kw, s_, nk, rotation_scale(nk));
    cuda::kv_store(v, vw, kv.v, kv.type_v, pos0, n_tokens, vw, s_, nv, rotation_scale(nv));
  }

  void attention(const AttentionArgs& a) override {
    ++calls_;
    check_kv_types(a.kv, "attention");
    if (a.kv.head_dim_k != a.kv.head_dim_v)
      fail(ErrorKind::unsupported, "cuda attention: K and V head sizes differ ({} vs {})", a.kv.head_dim_k, a.kv.head_dim_v);
    cuda::AttentionArgs c;
    c.q = a.q;
    c.q_ld_token = a.q_token_stride;
    c.q_ld_head = a.q_head_stride;
    set_cache(c, a.kv);
    c.gate = a.gate;
    c.gate_ld_token = a.q_token_stride;
    c.gate_ld_head = a.q_head_stride;
    c.out = a.out;
    c.out_ld_token = int64_t{a.n_head} * a.kv.head_dim_v;
    c.n_tokens = a.n_tokens;
    c.p0 = a.pos0;
    if (a.pos && a.n_tokens <= cuda::kAttentionRowsMaxTokens) {
      // Decode: the kernels read the position; the launch is planned for a bucket of keys, so
      // token after token it is the same launch (eager or replayed in a step graph alike).
      c.p0_dev = a.pos;
      c.p0 = cuda::attention_plan_keys(a.pos0 + a.n_tokens, a.kv.n_ctx) - a.n_tokens;
    }
    c.n_head = a.n_head;
    c.n_head_kv = a.kv.n_head_kv;
    c.head_dim = a.kv.head_dim_k;
    c.scale = a.scale;
    c.workspace = attn_ws_.data();
    c.workspace_bytes = attn_ws_.bytes();
    cuda::attention(c, s_);
  }

  void swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n, float* dst) override {
    ++calls_;
    cuda::swiglu(gate, up, dst, n_rows * n, s_);
  }

  void moe_route(const float* logits, int64_t n_tokens, int32_t n_expert, int32_t top_k, bool renormalize,
                 float scale, int32_t* ids, float* weights) override {
    ++calls_;
    cuda::route_topk(logits, n_tokens, n_expert, top_k, ids, weights, renormalize, scale, s_);
  }

  void add(const float* a, const float* b, int64_t n, float* dst) override { ++calls_; cuda::add(a, b, dst, n, s_); }
  void scale(float* x, int64_t n, float s) override { ++calls_; cuda::scale(x, s, x, n, s_); }
  void sigmoid_gated_add(const float* x, const float* gate_logit, int64_t n_tokens, int64_t n, float* dst) override {
    ++calls_;
    cuda::sigmoid_gate_add(dst, x, gate_logit, n_tokens, n, s_);
  }
  void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) override {
    ++calls_;
    cuda::argmax_rows(x, n, n_rows, n, out, s_);
  }

  // The cache operands cuda::AttentionArgs and cuda::AttentionPrepArgs share: buffers, types and
  // the Hadamard rotation of quantized rows.
  template <class Args>
  static void set_cache(Args& c, const KvLayerView& kv) {
    c.k_cache = kv.k;
    c.v_cache = kv.v;
    c.k_type = kv.type_k;
    c.v_type = kv.type_v;
    c.n_rot_k = rot_k(kv);
    c.n_rot_v = rot_v(kv);
    c.rot_scale_k = rotation_scale(c.n_rot_k);
    c.rot_scale_v = rotation_scale(c.n_rot_v);
  }

  // The attention prologue as one kernel for any batch (kernels/cuda/attention_prep.cu): the q/k
  // norms, RoPE and the K/V store, bit for bit the unfused kernels' results.
  void attention_prep(const AttentionPrep& p) override {
    if (!fusion_) {
      Ops::attention_prep(p);
      return;
    }
    ++calls_;
    check_cache_rows(p.kv, p.pos0, p.n_tokens, "attention_prep");
    cuda::AttentionPrepArgs c;
    c.q = p.q;
    c.q_ld_head = p.q_head_stride;
    c.n_head = p.n_head;
    c.k = p.k;
    c.v = p.v;
    c.q_norm = p.q_norm;
    c.k_norm = p.k_norm;
    c.eps = p.eps;
    c.n_rot = p.n_rot;
    c.pos = p.pos;
    c.freq_base = p.freq_base;
    set_cache(c, p.kv);
    c.n_head_kv = p.kv.n_head_kv;
    c.head_dim = p.kv.head_dim_k;
    c.head_dim_v = p.kv.head_dim_v;
    c.p0 = p.pos0;
    if (p.n_tokens <= cuda::kAttentionRowsMaxTokens) {  // the rows from pos[0] == pos0: see attention()
      c.p0_dev = p.pos;
      c.p0 = 0;
    }
    c.n_tokens = p.n_tokens;
    cuda::attention_prep(c, s_);
  }

 private:
  Device& dev_;
  std::unique_ptr<Stream> stream_;
  cudaStream_t s_ = nullptr;
  bool pdl_ = false;  // this Ops turned programmatic dependent launch on (and turns it off)
  bool kv_types_seen_ = false;  // check_cache_rows has looked at the cache types (its warning, once)
  std::unique_ptr<cuda::Blas> blas_;
  DeviceBuffer matmul_ws_, attn_ws_, blas_ws_;
  DeviceBuffer route_counter_;  // the router epilogue's block count (cuda::RouteEpilogue), 0 between launches
  bool fusion_ = true;     // CudaOpsOptions::fusion
  bool int8_dot_ = false;  // one-token quantized matmuls through cuda::matvec_q8 (matmul_ws_ holds x̃)
  cpu::GdnPrefill gdn_prefill_;  // what make_gdn_ops() hands the DeltaNet ops
  struct ResidentKey {
    const void* data;
    GgmlType type;
    int64_t rows, cols;
    bool operator==(const ResidentKey&) const = default;
  };
  struct ResidentHash {
    size_t operator()(const ResidentKey& k) const {
      return std::hash<const void*>()(k.data) ^ (std::hash<int64_t>()(k.rows * 1000003 + k.cols) << 1) ^
             static_cast<size_t>(k.type);
    }
  };
  uint64_t calls_ = 0;
  CudaStepGraphs graphs_;

  std::mutex mu_;
  std::unordered_map<ResidentKey, DeviceBuffer, ResidentHash> resident_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(Device& device, const CudaOpsOptions& options) {
  if (device.kind() != DeviceKind::cuda)
    fail(ErrorKind::invalid_arg, "cuda ops need a cuda device, got '{}'", device_kind_name(device.kind()));
  return std::make_unique<CudaOps>(device, options);
}

namespace {
CudaOps& as_cuda(Ops& ops) {
  auto* c = dynamic_cast<CudaOps*>(&ops);
  if (!c) fail(ErrorKind::invalid_arg, "expected the cuda ops backend, got '{}'", ops.name());
  return *c;
}
}  // namespace

void* cuda_ops_stream(Ops& ops) { return as_cuda(ops).stream(); }
Device& cuda_ops_device(Ops& ops) { return as_cuda(ops).device(); }
void cuda_ops_grow(Ops& ops, DeviceBuffer& buf, size_t bytes, const char* tag) {
  if (bytes <= buf.bytes()) return;
  CudaOps& c = as_cuda(ops);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(c.stream())));
  buf = DeviceBuffer();
  buf = c.device().alloc(bytes, tag);
}
uint64_t cuda_ops_calls(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  return c ? c->calls() : 0;
}
uint64_t cuda_ops_workspace_bytes(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  return c ? c->workspace_bytes() : 0;
}
cpu::GdnPrefill cuda_ops_gdn_prefill(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  return c ? c->gdn_prefill() : cpu::GdnPrefill::recurrent;
}
CudaGraphStats cuda_ops_graph_stats(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  return c ? c->graph_stats() : CudaGraphStats{};
}
void cuda_ops_set_graphs(Ops& ops, bool on) {
  if (auto* c = dynamic_cast<CudaOps*>(&ops)) c->set_graphs(on);
}
uint64_t cuda_kernels_launched() { return cuda::kernels_launched(); }
bool cuda_ops_fusion(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  return c && c->fusion();
}

}  // namespace ferry

#else

namespace ferry {

std::unique_ptr<Ops> make_cuda_ops(Device&, const CudaOpsOptions&) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}
void* cuda_ops_stream(Ops& ops) { fail(ErrorKind::invalid_arg, "expected the cuda ops backend, got '{}'", ops.name()); }
Device& cuda_ops_device(Ops& ops) { fail(ErrorKind::invalid_arg, "expected the cuda ops backend, got '{}'", ops.name()); }
void cuda_ops_grow(Ops& ops, DeviceBuffer&, size_t, const char*) {
  fail(ErrorKind::invalid_arg, "expected the cuda ops backend, got '{}'", ops.name());
}
uint64_t cuda_ops_calls(const Ops&) { return 0; }
uint64_t cuda_ops_workspace_bytes(const Ops&) { return 0; }
cpu::GdnPrefill cuda_ops_gdn_prefill(const Ops&) { return cpu::GdnPrefill::recurrent; }
CudaGraphStats cuda_ops_graph_stats(const Ops&) { return {}; }
void cuda_ops_set_graphs(Ops&, bool) {}
uint64_t cuda_kernels_launched() { return 0; }
bool cuda_ops_fusion(const Ops&) { return false; }

}  // namespace ferry

#endif
