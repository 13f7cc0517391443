#pragma once
// The op set a model forward is written against, once, for every backend. The CPU implementation
// (CpuOps, cpu_ops*.cpp) runs on host memory with oneTBB; a CUDA implementation runs the same
// calls on device memory. Rules every implementation follows (docs/decisions/0001-ops-interface.md):
//
//  - Buffers are raw pointers into memory of this backend (host on the CPU, device on CUDA),
//    owned by the caller (a session's workspace, a KV cache). Ops never allocate per call what the
//    caller could own, and never keep pointers past the call.
//  - Shapes are in elements, row-major, fastest dimension last in the comment: `(n_tokens, n_embd)`
//    means n_tokens rows of n_embd floats. Strides, where an op takes them, are in elements.
//  - Ops are enqueued in call order; results are visible to later ops of the same Ops object.
//    to_host()/sync() make them visible to the host (the CPU backend computes synchronously).
//  - Numerics follow ggml's CPU backend (the oracle): float accumulation with double where ggml
//    uses double (norm and softmax sums), activations quantized to vec_dot_type(weight) for
//    quantized weights, F16 caches dotted in F16 (the query and the attention probabilities are
//    rounded to F16, as ggml's F16×F16 dot does).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "runtime/core/types.hpp"

namespace ferry {

class GdnOps;  // runtime/backend/gdn_ops.hpp

// A weight matrix (rows, cols), row r at data + r·row_bytes(type, cols). In GGUF terms ne = {cols,
// rows}: a projection {n_in, n_out} is a WeightView with rows = n_out, cols = n_in, and y = W·x.
// 1-D norm weights are WeightViews with rows = 1 and type F32.
struct WeightView {
  const void* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  WeightLayout layout = WeightLayout::file;  // rows16: only the CPU's matmul reads it
};

// Backend memory with RAII: freed through the backend that made it.
class DeviceBuffer {
 public:
  using Free = std::function<void(void*)>;
  DeviceBuffer() = default;
  DeviceBuffer(void* p, size_t bytes, Free free) : p_(p), bytes_(bytes), free_(std::move(free)) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer t(std::move(o));
    swap(t);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_ && free_) free_(p_);
  }
  void* data() const { return p_; }
  float* f32() const { return static_cast<float*>(p_); }
  int32_t* i32() const { return static_cast<int32_t*>(p_); }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    std::swap(free_, o.free_);
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
  Free free_;
};

// One layer's KV cache. Layout (fixed for all backends, token-major so that appending a batch is
// one contiguous write and attention kernels stream keys in order):
//   k: (n_ctx, n_head_kv, head_dim_k) of type_k      v: (n_ctx, n_head_kv, head_dim_v) of type_v
// Types are chosen separately among kv_cache_type_supported() ones; a quantized type stores each
// head row as row_bytes(type, head_dim) bytes of blocks (head_dim a multiple of the block size),
// so a cache row of one position is n_head_kv such head rows.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int64_t n_ctx = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim_k = 0;
  int32_t head_dim_v = 0;
  // Bytes of one head row (one position, one KV head) of K / V.
  size_t k_head_bytes() const { return static_cast<size_t>(row_bytes(type_k, static_cast<uint64_t>(head_dim_k))); }
  size_t v_head_bytes() const { return static_cast<size_t>(row_bytes(type_v, static_cast<uint64_t>(head_dim_v))); }
};

// The KV cache types (llama.cpp's -ctk/-ctv set): F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL, Q5_0,
// Q5_1. Quantized ones are written as ggml-cpu writes them (cpu::quantize_row_cpu).
bool kv_cache_type_supported(GgmlType t);
// "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1": for messages.
const char* kv_cache_type_names();

// Causal GQA attention for a batch of new tokens at positions [pos0, pos0 + n_tokens) whose K/V are
// already stored in the cache (kv_store); token i attends to cache rows [0, pos0 + i].
// Query head h uses KV head h / (n_head / n_head_kv).
struct AttentionArgs {
  // q: token t, head h at q + t·q_token_stride + h·q_head_stride, head_dim_k floats.
  const float* q = nullptr;
  int64_t q_token_stride = 0;
  int64_t q_head_stride = 0;
  // Optional output gate (qwen35moe): out ⊙= sigmoid(gate), gate laid out like q (same strides),
  // head_dim_v floats per head. nullptr: no gate.
  const float* gate = nullptr;
  KvLayerView kv;
  int32_t n_tokens = 0;
  int32_t n_head = 0;
  int64_t pos0 = 0;
  // Optional: the batch's positions in backend memory (pos[t] == pos0 + t). A device backend may
  // read the position there at run time, so that a step launches the same kernels with the same
  // arguments token after token (CUDA step graphs replayed as recorded: begin_graph). nullptr:
  // pos0 only.
  const int32_t* pos = nullptr;
  float scale = 1.0f;  // applied to q·k (1/√head_dim)
  float* out = nullptr;  // (n_tokens, n_head, head_dim_v) contiguous
};

// One output of matmul_multi: y = X·wᵀ with row stride ldy. With `up` (up.data set: same shape as
// w, ldy = w.rows), a SwiGLU pair: also up_y = X·upᵀ, then y = silu(y) ⊙ up_y (swiglu); a backend
// that fuses the pair may leave up_y unwritten.
struct MatmulTarget {
  WeightView w;
  float* y = nullptr;
  int64_t ldy = 0;
  WeightView up{};
  float* up_y = nullptr;
};

// residual_norm's operands: the join of a block's output into the residual stream, with the
// shared-expert gate and the next RMSNorm folded in. x, a, b, h: (n_tokens, n) contiguous;
// gate_logit: (n_tokens).
struct ResidualNorm {
  float* a = nullptr;                   // the block's output (gets the gated shared expert added)
  const float* b = nullptr;             // the shared expert's output, or nullptr: no gate
  const float* gate_logit = nullptr;    // its gate logit per token (with b)
  const float* w = nullptr;             // the next RMSNorm's weight (n), or nullptr: no norm
  float eps = 0.0f;
  float* h = nullptr;                   // the normalised rows (with w)
};

// moe_route's operands, for matmul_multi_route: the router's logits are one of the targets' y.
struct RouteArgs {
  const float* logits = nullptr;  // (n_tokens, n_expert)
  int32_t n_expert = 0;
  int32_t top_k = 0;
  bool renormalize = false;
  float scale = 0.0f;
  int32_t* ids = nullptr;    // (n_tokens, top_k)
  float* weights = nullptr;  // (n_tokens, top_k)
};

// attention_prep's operands: an attention block's prologue after its q/k/v projections — the
// per-head q and k RMSNorms, NEOX RoPE of both, and the store of k and v into the cache. The head
// size is kv.head_dim_k, the KV heads kv.n_head_kv.
struct AttentionPrep {
  float* q = nullptr;              // token t, head h at q + (t·n_head + h)·q_head_stride; in place
  int64_t q_head_stride = 0;       // head_dim_k, or 2·head_dim_k for qwen35moe's [q | gate] rows
  int32_t n_head = 0;
  float* k = nullptr;              // (n_tokens, n_head_kv, head_dim_k) contiguous; in place
  const float* v = nullptr;        // (n_tokens, n_head_kv, head_dim_v) contiguous
  const float* q_norm = nullptr;   // (head_dim_k) F32
  const float* k_norm = nullptr;   // (head_dim_k) F32
  float eps = 0.0f;
  int32_t n_rot = 0;               // RoPE on the first n_rot dims of each head
  const int32_t* pos = nullptr;    // (n_tokens) positions (backend memory)
  float freq_base = 0.0f;
  KvLayerView kv;
  int64_t pos0 = 0;                // the cache rows [pos0, pos0 + n_tokens) are written
  int64_t n_tokens = 0;
};

// Which backend an Ops is: callers that pair other work with it (the MoE executors, the session's
// host-memory check) ask this, never the name.
enum class BackendKind { cpu, cuda };

class Ops {
 public:
  virtual ~Ops() = default;
  virtual BackendKind kind() const = 0;
  virtual const char* name() const = 0;  // "cpu", "cuda": for messages

  // --- memory
  virtual DeviceBuffer alloc(size_t bytes) = 0;  // uninitialised, aligned to 64 bytes
  virtual void to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void to_host(void* dst_host, const void* src, size_t bytes) = 0;  // waits for prior ops
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  virtual void sync() = 0;
  // A view of a host (mmapped GGUF) weight usable by this backend's ops. The CPU returns `host`
  // unchanged; a device backend copies it once and owns the copy for its own lifetime (asking
  // twice for the same host data returns the same copy: tied embedding/lm_head tables).
  virtual WeightView resident(const WeightView& host) = 0;
  // As resident(), for a matrix that is only ever an operand of matmul (never embed's table): the
  // CPU may then keep it in a faster layout of its own (CpuOps: kernels/cpu/rows16.hpp).
  virtual WeightView resident_matmul(const WeightView& host) { return resident(host); }

  // --- step graphs (CUDA graphs; docs/decisions/0005): the Ops calls between begin_graph() and
  // end_graph() are recorded instead of run, then launched as one graph. begin_graph() returns
  // false where the backend does not (the CPU; graphs off; the warm-up step), and the step runs
  // eagerly. end_graph() returns false when the recording failed: nothing of the step ran, graphs
  // are now off, and the caller runs the step again eagerly. abort_graph() drops a recording after
  // an exception (graphs stay on); disable_graphs() turns them off for good, with the reason.
  // Inside a recording: no to_host, sync or alloc.
  // With `segmented`, the step's MoE steps run eagerly between recorded stretches: pause_graph()
  // launches what was recorded so far, resume_graph() records on (no-ops when not recording). A
  // step of which a segment already ran cannot be run again (graph_partially_ran()).
  // With `replayable` (a one-token step whose MoE work is the same device work with the same
  // arguments every token: MoeExecutor::replayable), a backend may first run the step's calls on
  // the host only, to find a graph it recorded for the same calls, and launch that as it is; when
  // it has none, end_graph() returns false with graph_retry() true: graphs stay on, nothing of the
  // step ran, and the caller records the step now (begin_graph again).
  virtual bool begin_graph(bool segmented, bool replayable) {
    (void)segmented, (void)replayable;
    return false;
  }
  virtual bool graph_retry() const { return false; }
  virtual bool end_graph() { return false; }
  virtual void pause_graph() {}
  virtual void resume_graph() {}
  virtual bool graph_partially_ran() const { return false; }
  virtual void abort_graph() {}
  virtual void disable_graphs(const char* why) {}

  // The Gated DeltaNet ops of this backend (runtime/backend/gdn_ops.hpp), enqueued in order with
  // these ops; the result must not outlive them. Default: ErrorKind::unsupported naming the
  // backend.
  virtual std::unique_ptr<GdnOps> make_gdn_ops();

  // Whether kv_store/attention of this backend take a KV cache of type t (KvCache asks when a
  // session is made). Default: every kv_cache_type_supported() type.
  virtual bool kv_type_supported(GgmlType t) const { return kv_cache_type_supported(t); }

  // --- ops. In-place use is allowed where marked (dst may equal src).
  // dst[i] = dequantized row ids[i] of table.   ids: (n)   dst: (n, table.cols)
  virtual void embed(const WeightView& table, const int32_t* ids, int64_t n, float* dst) = 0;

  // RMSNorm over rows: dst[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ w. Rows of `n` floats at stride
  // ld (elements) in both x and dst; w: (n) F32. Used per token (ld = n_embd) and per head for q/k
  // norms (n = head_dim, rows = n_tokens·n_head, ld = head stride). In-place allowed.
  virtual void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld,
                       float eps, float* dst) = 0;

  // Y = X·Wᵀ: X (n, W.cols) with row stride ldx, Y (n, W.rows) with row stride ldy. n = 1 is the
  // decode matvec. Quantized W: X is quantized to vec_dot_type(W.type) once per row.
  virtual void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n, float* y,
                      int64_t ldy) = 0;

  // NEOX RoPE, in place, on the first n_rot dims of each head: pairs (j, j + n_rot/2) rotated by
  // pos·freq_base^(-2j/n_rot). x: token t, head h at x + t·token_stride + h·head_stride.
  // pos: (n_tokens) positions (backend memory).
  virtual void rope_neox(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride,
                         int64_t head_stride, int32_t n_rot, const int32_t* pos,
                         float freq_base) = 0;

  // Writes n_tokens rows of K and V into the cache at rows [pos0, pos0 + n_tokens), converting to
  // kv.type_k / kv.type_v. k: (n_tokens, n_head_kv, head_dim_k) contiguous; v likewise with head_dim_v.
  virtual void kv_store(const KvLayerView& kv, int64_t pos0, int64_t n_tokens, const float* k,
                        const float* v) = 0;

  virtual void attention(const AttentionArgs& a) = 0;

  // dst[r] = silu(gate[r]) ⊙ up[r] for n_rows rows of n floats (contiguous). In-place allowed.
  virtual void swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n, float* dst) = 0;

  // Routing, per token: p = softmax(logits[t]); ids[t] = the top_k experts by p (descending);
  // weights[t] = p[ids], divided by their sum (clamped ≥ 2^-14) when renormalize, then times
  // scale when scale ∉ {0, 1}. logits: (n_tokens, n_expert); ids, weights: (n_tokens, top_k).
  virtual void moe_route(const float* logits, int64_t n_tokens, int32_t n_expert, int32_t top_k,
                         bool renormalize, float scale, int32_t* ids, float* weights) = 0;

  // dst = a + b over n floats. In-place allowed (dst == a or dst == b).
  virtual void add(const float* a, const float* b, int64_t n, float* dst) = 0;
  // x ·= s over n floats.
  virtual void scale(float* x, int64_t n, float s) = 0;
  // Shared-expert gate: dst[t] += sigmoid(gate_logit[t]) · x[t] for rows of n floats.
  // gate_logit: (n_tokens) ; x, dst: (n_tokens, n).
  virtual void sigmoid_gated_add(const float* x, const float* gate_logit, int64_t n_tokens,
                                 int64_t n, float* dst) = 0;
  // out[r] = index of the largest value of row r (lowest index on ties). x: (n_rows, n).
  virtual void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) = 0;

  // --- fused ops: each defined as the sequence of the ops above it replaces, which is what the
  // default runs (so the CPU keeps ggml's arithmetic order and the oracle tests stay exact); a
  // device backend may run the sequence as fewer kernels (CUDA: kernels/README.md, "Fused decode").
  // Several projections of one input: matmul(t.w, x, ldx, n, t.y, t.ldy) for each target in order.
  // Every w has the same cols.
  virtual void matmul_multi(std::span<const MatmulTarget> targets, const float* x, int64_t ldx, int64_t n);
  // The MoE input's projections, the router among them, then the routing: matmul_multi(targets,
  // x, ldx, n); moe_route(r.logits, n, r.n_expert, r.top_k, r.renormalize, r.scale, r.ids, r.weights).
  virtual void matmul_multi_route(std::span<const MatmulTarget> targets, const float* x, int64_t ldx, int64_t n,
                                  const RouteArgs& r);
  // With b: sigmoid_gated_add(b, gate_logit, n_tokens, n, a); then add(x, a, n_tokens·n, x); then,
  // with w, rmsnorm(x, w, n_tokens, n, n, eps, h).
  virtual void residual_norm(float* x, int64_t n_tokens, int64_t n, const ResidualNorm& r);
  // rmsnorm(q, q_norm, n_tokens·n_head, hd, q_head_stride, eps, q); rmsnorm(k, k_norm,
  // n_tokens·n_head_kv, hd, hd, eps, k); rope_neox(q, n_tokens, n_head, n_head·q_head_stride,
  // q_head_stride, n_rot, pos, freq_base); rope_neox(k, n_tokens, n_head_kv, n_head_kv·hd, hd, ...);
  // kv_store(kv, pos0, n_tokens, k, v) — hd = kv.head_dim_k.
  virtual void attention_prep(const AttentionPrep& p);
};

}  // namespace ferry
