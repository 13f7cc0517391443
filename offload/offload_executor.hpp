#pragma once
// The offload MoE executor: an MoeExecutor over a Device whose memory holds only part of the routed
// experts (the plan's slots). Per MoE step and used expert:
//   resident (a ready slot)      → computed from the slot
//   prefetch in flight           → wait for its event, or compute on the CPU (cost model)
//   cold                         → compute on the CPU from the host store (and, in decode, admit it
//                                  into a slot in the background), or copy into a slot now
// Prefill streams the step's cold experts through two staging slots (copy of expert i+1 overlaps
// the compute of expert i) when the cost model says copy + device beats the CPU for their groups.
// After the current experts are pinned, the predictor's guesses for later layers are prefetched.
//
// Two flows:
//  - exact (sim only, the default there): "device kernels" are the CPU kernels reading the sim
//    arena, run synchronously, so every path (slot, host store, staging) runs the same code and the
//    logits are bit-identical to MoeCpuExecutor's whatever the budget.
//  - device (cuda; sim with OffloadOptions::device_flow): the step's slot experts run as device
//    kernels (DeviceExpertKernels) on a compute stream, from a per-step table of slot pointers that
//    is uploaded with the local ids and weights in one copy; streamed prefill experts run from the
//    two staging slots (the compute stream waits for each copy's event, the copy stream for the
//    compute that last read the slot: no host wait); CPU experts run on the host meanwhile and
//    their weighted sum is uploaded and added on the compute stream. Nothing waits for the step's
//    kernels: a slot that queued kernels read is only refilled by a copy that waits for the compute
//    stream's last recorded event. On cuda the request comes through the host bridge
//    (runtime/backend/cuda_moe_bridge.hpp): host routing and x, device x (MoeRequest::device) and
//    device out. Numerics: the slot part follows the device kernels, the CPU part MoeCpuExecutor,
//    added in another order — within the CPU-vs-GPU bound, not bit-identical.
#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "offload/cost_model.hpp"
#include "offload/cpu_experts.hpp"
#include "offload/device_experts.hpp"
#include "offload/expert_cache.hpp"
#include "offload/host_store.hpp"
#include "offload/moe.hpp"
#include "offload/placement.hpp"
#include "offload/placement_profile.hpp"
#include "offload/prefetcher.hpp"
#include "offload/trace.hpp"
#include "runtime/backend/device.hpp"

namespace ferry {

// auto_: the cost model decides; others force a path. mapped (device flow only): a decode miss is
// read by the device kernels in place from the pinned host store over the link (no slot, no
// copy), and admitted behind as with cpu; prefill keeps the cost model (reading in place costs the
// link once per token there).
enum class ColdMode { auto_, cpu, copy, mapped };
ColdMode parse_cold_mode(std::string_view s);  // "auto" | "cpu" | "copy" | "mapped"

struct OffloadOptions {
  Plan plan;
  std::string gguf_path;
  // (n_layer) absolute file offsets of ffn_gate_exps, ffn_up_exps, ffn_down_exps (uring/mmap load).
  std::vector<std::array<uint64_t, 3>> file_offsets;
  HostLoad host_load = HostLoad::alias;
  EvictionPolicy policy = EvictionPolicy::lrfu;
  ColdMode cold = ColdMode::auto_;
  std::optional<HardwareRates> rates;  // nullopt: calibrate at start-up
  int32_t prefetch_in_flight = 8;
  // Decode misses computed on the CPU are copied into a slot in the background (Prefetcher::admit).
  bool admit = true;
  ExpertPredictor* predictor = nullptr;  // not owned; may be null
  ExpertProfile* record = nullptr;       // not owned; counts every step's routing when set
  // Charge the plan's dense/KV/state/workspace to the device as reservations, so the pool's
  // accounting covers the whole budget (sim: the forward's own buffers live elsewhere).
  bool reserve_fixed = true;
  StoreProgress progress;
  // --trace (not owned; may be null): "h2d" spans of every expert copy on a track per copy stream
  // (timed on the stream by host_fn markers), "wait" spans where the host blocks on a copy, and
  // "experts" spans of the step's expert compute with where each expert came from.
  Tracer* tracer = nullptr;
  // sim: run the device flow (what cuda runs) instead of the exact synchronous one.
  bool device_flow = false;
  // Device flow: the step buffers are allocated for this many tokens at start (larger steps grow
  // them); the plan leaves device_flow_step_bytes for them.
  int64_t max_batch = 512;
  // Device flow: decode steps from device tables, without a host synchronisation (--offload-decode
  // table; on sim the same tables and log, the CPU forward waiting for each step — for hit rates
  // and link bytes: sim "kernels" read the mapped store at CPU speed, the link is not modelled). Per layer a device table of n_expert expert pointers, each at the expert's slot when a
  // ready slot holds it and at its mapped pinned host copy otherwise; a one-token step runs the
  // grouped kernels on the router's device ids over that table (misses are read in place over
  // the link, as ColdMode::mapped) and logs the ids, so the step can be recorded as a CUDA graph.
  // before_step() reads the previous step's log (hits, misses, recency; misses are admitted
  // behind) and rewrites the table entries that changed; the plan leaves decode_table_bytes.
  // Prefill steps keep the host-routed device flow. No CPU experts and no predictor prefetch in
  // decode (both need the routing on the host). Needs a host store the device can map (uring).
  bool decode_table = false;
};

// Device memory of the decode tables (n_layer · n_expert pointer triples) and the routing log.
uint64_t decode_table_bytes(int32_t n_layer, int32_t n_expert, int32_t top_k);

// Device memory the device flow's step buffers take for steps of up to max_batch tokens: the
// uploaded table / weights / local ids / streamed experts' (token, slot) pairs, the CPU experts' sum,
// and the expert kernels' scratch (max_batch · top_k · n_ff floats).
uint64_t device_flow_step_bytes(int64_t max_batch, const ExpertShape& s, int32_t top_k, int32_t n_expert);

struct OffloadStats {
  uint64_t steps = 0, tokens = 0;
  uint64_t uses = 0;      // (step, distinct expert) pairs
  uint64_t hits = 0;      // ready slot
  uint64_t inflight = 0;  // prefetch still in flight when needed
  uint64_t waited = 0;    // ... and waited for
  uint64_t misses = 0;    // not in the cache
  uint64_t cpu_experts = 0, copy_now = 0, streamed = 0;
  uint64_t mapped = 0;        // decode misses read in place from mapped host memory
  uint64_t mapped_bytes = 0;  // ... their weight bytes (read over the link, not copied)
  // decode_table: tokens decoded from the device tables (their uses, hits and mapped reads are
  // counted from the routing log before the next step), and table entries rewritten.
  uint64_t table_tokens = 0, table_updates = 0;
  uint64_t h2d_bytes = 0;   // demand and streaming copies (prefetch bytes: prefetch.bytes)
  uint64_t init_bytes = 0;  // the initial hot set
  double wait_ms = 0;       // host time blocked on copies (demand, stream, prefetch waits)
  double cpu_ms = 0, compute_ms = 0;
  std::vector<uint64_t> layer_uses, layer_hits;  // (n_layer)
  // Device flow: time the compute stream sat idle, by cause (WaitCause order: copy, cpu_expert,
  // sync). copy: host waits on demand copies and prefetches before the step's kernels could be
  // queued; cpu_expert: from the end of the step's device kernels to the upload of the CPU
  // experts' sum (events); sync: from the routing reaching the host (the bridge) to the step's
  // first enqueue, less the copy waits. Prefill streaming: its GPU time (events) and bytes.
  bool device_flow = false;
  double device_wait_ms[3] = {0, 0, 0};
  double stream_gpu_ms = 0;
  uint64_t stream_bytes = 0;
  PrefetchCounters prefetch;
  CacheCounters cache;
  MemoryStats memory;
  HardwareRates rates;
  HostStoreStats store;
  int32_t n_slots = 0;
};
std::string offload_stats_text(const OffloadStats& s);

class OffloadExecutor final : public MoeExecutor {
 public:
  // layers: the experts as the model sees them (views into the GGUF mapping).
  // The executor owns `device` (sim). With options.device_flow it makes its own compute stream and
  // the sim expert kernels.
  OffloadExecutor(std::unique_ptr<Device> device, std::vector<MoeLayerWeights> layers,
                  OffloadOptions options);
  // Device flow on a device owned elsewhere (cuda: the CudaOps's device and a view of its stream,
  // so the expert kernels are ordered with the forward's own ops and share its budget).
  OffloadExecutor(Device& device, std::unique_ptr<Stream> compute, std::unique_ptr<DeviceExpertKernels> kernels,
                  std::vector<MoeLayerWeights> layers, OffloadOptions options);
  ~OffloadExecutor() override;
  void run(const MoeRequest& req) override;
  // decode_table: one-token steps take the forward's device routing and can be recorded.
  bool capturable() const override { return o_.decode_table; }
  bool device_routing(int32_t n_tokens) const override { return o_.decode_table && n_tokens == 1; }
  void before_step(int64_t n_tokens) override;
  void after_step(int64_t n_tokens) override;

  // Counts the last table step's routing, waits for every copy in flight (prefetches included)
  // and settles their slots.
  void drain();
  OffloadStats stats() const;
  void reset_stats();
  Device& device() { return *device_; }
  bool device_flow() const { return compute_ != nullptr; }
  const ExpertCache& cache() const { return *cache_; }
  const Plan& plan() const { return o_.plan; }
  void set_predictor(ExpertPredictor* p) { o_.predictor = p; }
  // J's per-layer counters (--stats): hits, misses, CPU experts, prefetches, H2D bytes, copy
  // waits, device memory in use. May be null.
  void set_counters(StatsCounters* c);

 private:
  struct Resolved {
    int32_t expert = -1;
    ExpertPtrs3 w;
    int32_t pinned_slot = -1;  // unpinned after the step
    bool stream = false;       // prefill: through the staging slots
    bool mapped = false;       // device kernels read w (mapped host addresses) in place
  };
  ExpertPtrs3 slot_ptrs(int32_t slot, int32_t layer) const;
  ExpertPtrs3 host_ptrs(int32_t layer, int32_t expert) const;
  ExpertPtrs3 staging_ptrs(size_t b, int32_t layer) const;  // prefill staging slot b (0 or 1)
  // Device flow: grows a device buffer, draining the compute stream first.
  void grow_device(DeviceBuffer& b, size_t bytes, const char* tag);
  void fill_slot(int32_t slot, int32_t layer, int32_t expert, Stream& s);
  // issue() enqueues a copy of `bytes` on s; with a tracer, brackets it with host_fn markers that
  // record an "h2d" span on s's track.
  void traced_copy(Stream& s, int32_t layer, int32_t expert, uint64_t bytes, const std::function<void()>& issue);
  int32_t track_of(const Stream& s);
  // n_tokens: the expert's tokens in this step (the cost model's batch); decode: a one-token step
  // (prefill groups of one token are not admitted nor read in place).
  Resolved resolve(int32_t layer, int32_t expert, int64_t n_tokens, uint64_t now, bool decode);
  // Copies a streamed expert (r.w: host store) into staging slot b on the demand stream and
  // records staging_done_[b].
  void stage(int32_t layer, const Resolved& r, size_t b);
  void init();
  void run_decode(const MoeRequest& req, std::vector<Resolved>& r);
  void run_prefill(const MoeRequest& req, std::vector<Resolved>& used);
  // The device flow's step; `used`: one Resolved per distinct expert of the step.
  void run_device(const MoeRequest& req, const std::vector<Resolved>& used);
  void cpu_part(const MoeRequest& req, const std::vector<Resolved>& cpu, float* partial);
  void predict_and_prefetch(const MoeRequest& req);
  // decode_table (OffloadOptions::decode_table).
  void run_table(const MoeRequest& req);
  void read_routing_log();  // the last table step's routing: counters, recency, admissions
  void sync_tables();       // table entries at ready slots, the rest at the mapped host store

  OffloadOptions o_;
  std::unique_ptr<Device> owned_device_;
  Device* device_ = nullptr;
  std::vector<MoeLayerWeights> layers_;  // host views (host store)
  std::vector<ExpertShape> shapes_;      // (n_layer)
  std::unique_ptr<HostStore> store_;
  std::vector<DeviceBuffer> reserved_;  // dense/KV/state/workspace reservations
  DeviceBuffer slots_, staging_, table_;
  std::vector<ExpertPtrs3> table_host_;  // (n_slots) mirror of the device slot table
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::unique_ptr<Stream> demand_;  // copy-now and prefill streaming
  std::unique_ptr<Event> demand_done_;
  std::array<std::unique_ptr<Event>, 2> staging_done_;
  CostModel cost_;
  uint64_t tick_ = 0;
  int32_t last_layer_ = -1;
  std::vector<float> y_;  // (n_tokens, top_k, n_embd) per-slot expert outputs
  std::vector<PredictedExpert> predicted_;
  OffloadStats st_;
  StatsCounters* counters_ = nullptr;
  std::vector<const Stream*> tracks_;  // --trace: copy streams seen, track = kCopyTrack0 + index

  // Device flow (null / empty in the exact flow).
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<DeviceExpertKernels> kernels_;
  std::unique_ptr<Event> compute_done_;                 // last step's kernels (slot refills wait)
  std::array<std::unique_ptr<Event>, 2> staging_free_;  // the kernels that last read a staging slot
  HostBuffer step_host_, partial_host_;                 // pinned: table | weights | ids, CPU partial sum
  std::vector<MoeLayerWeights> mapped_;  // ColdMode::mapped: the host store as the device reads it
  // Idle-time measurement (OffloadStats::device_wait_ms): events read back one step later.
  std::unique_ptr<Event> kernels_done_, cpu_ready_, stream_begin_, stream_end_;
  bool pending_cpu_wait_ = false, pending_stream_ = false;
  double step_wait0_ = 0;  // st_.wait_ms when the step began
  bool step_recorded_ = false;  // device flow: compute_done_ covers this step's kernels
  void collect_device_waits();  // the compute stream has run everything recorded so far
  // Device flow calibration: the expert kernels' weight read rate (GB/s) for one token, reading
  // `entry` (device or mapped host addresses of an expert of layer 0).
  double measure_device_rate(const ExpertPtrs3& entry);
  // The same kernels reading experts of layer 0 in place from the mapped store, each expert once
  // (a repeated one could be served from the device's L2 instead of the link).
  double measure_mapped_rate();
  double time_expert_kernels(const std::vector<ExpertPtrs3>& entries);
  DeviceBuffer step_dev_, partial_dev_;

  // decode_table: the tables (device, and pinned as last queued), the step's routing log.
  DeviceBuffer tables_dev_, log_dev_;
  HostBuffer tables_host_, log_host_;
  std::vector<ExpertPtrs3> tables_mapped_, tables_want_;  // (n_layer · n_expert)
  std::unique_ptr<Event> tables_copied_, log_ready_;
  bool tables_pending_ = false, log_pending_ = false, tables_synced_ = false, warned_host_decode_ = false;
  uint64_t tables_version_ = 0;  // ExpertCache::version() the tables were last synced with
  std::vector<uint8_t> logged_;  // (n_layer) layers the step being built logged
};

}  // namespace ferry
