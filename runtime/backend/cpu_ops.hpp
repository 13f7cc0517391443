#pragma once
// The CPU implementation of Ops: host memory, oneTBB parallelism (bounded by the caller's
// tbb::global_control / task_arena), quantized products through kernels/cpu.
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/gdn.hpp"
#include "runtime/backend/ops.hpp"

namespace ferry {

struct CpuOpsOptions {
  // The Gated DeltaNet delta rule's form for prefill batches (kernels/cpu/gdn.hpp): the recurrence
  // is bit-identical to llama.cpp's CPU op; chunked is faster on the rule and agrees to rounding.
  cpu::GdnPrefill gdn_prefill = cpu::GdnPrefill::recurrent;
  // resident_matmul() repacks Q4_0, IQ4_NL and MXFP4 matrices into the sixteen-row interleaved
  // layout (kernels/cpu/rows16.hpp; bit-identical products, faster kernels), into at most
  // repack_budget bytes of new host memory; past it a matrix keeps the file's layout. Off with
  // `--no-repack`.
  bool repack = true;
  uint64_t repack_budget = UINT64_MAX;
  // Called with the file-layout bytes of each matrix just repacked, which nothing reads any more
  // (the engine hands their mapped pages back to the OS).
  std::function<void(const void* data, size_t bytes)> repacked;
};

class CpuOps final : public Ops {
 public:
  explicit CpuOps(const CpuOpsOptions& o = {}) : options_(o) {}
  BackendKind kind() const override { return BackendKind::cpu; }
  const char* name() const override { return "cpu"; }
  std::unique_ptr<GdnOps> make_gdn_ops() override;  // gdn_cpu.cpp

  DeviceBuffer alloc(size_t bytes) override;
  void to_device(void* dst, const void* src_host, size_t bytes) override;
  void to_host(void* dst_host, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void sync() override {}
  WeightView resident(const WeightView& host) override { return host; }
  WeightView resident_matmul(const WeightView& host) override;  // cpu_ops_repack.cpp
  // Bytes resident_matmul() repacked so far, and bytes it left in the file's layout for want of RAM.
  uint64_t repacked_bytes() const { return repacked_bytes_; }
  uint64_t repack_skipped_bytes() const { return repack_skipped_bytes_; }

  void embed(const WeightView& table, const int32_t* ids, int64_t n, float* dst) override;
  void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, int64_t ld, float eps,
               float* dst) override;
  void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n, float* y,
              int64_t ldy) override;
  void rope_neox(float* x, int64_t n_tokens, int64_t n_head, int64_t token_stride,
                 int64_t head_stride, int32_t n_rot, const int32_t* pos, float freq_base) override;
  void kv_store(const KvLayerView& kv, int64_t pos0, int64_t n_tokens, const float* k,
                const float* v) override;
  void attention(const AttentionArgs& a) override;
  void swiglu(const float* gate, const float* up, int64_t n_rows, int64_t n, float* dst) override;
  void moe_route(const float* logits, int64_t n_tokens, int32_t n_expert, int32_t top_k,
                 bool renormalize, float scale, int32_t* ids, float* weights) override;
  void add(const float* a, const float* b, int64_t n, float* dst) override;
  void scale(float* x, int64_t n, float s) override;
  void sigmoid_gated_add(const float* x, const float* gate_logit, int64_t n_tokens, int64_t n,
                         float* dst) override;
  void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) override;

 private:
  // Host memory of `bytes` bytes, aligned to `align` (a power of two; the size is rounded up to it).
  static DeviceBuffer host_buffer(size_t bytes, size_t align);

  struct Repacked {
    const void* host;  // the matrix's file-layout data
    WeightView view;   // its repack, in buf
    DeviceBuffer buf;
  };
  CpuOpsOptions options_;
  std::vector<Repacked> repacked_;
  uint64_t repacked_bytes_ = 0;
  uint64_t repack_skipped_bytes_ = 0;
};

}  // namespace ferry
