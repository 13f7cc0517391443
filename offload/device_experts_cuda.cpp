// The CUDA DeviceExpertKernels: kernels/cuda/moe.cuh over a per-step table of device pointers.
#include "offload/device_experts.hpp"
#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstring>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/ops.cuh"

namespace ferry {
namespace {

class CudaExpertKernels final : public DeviceExpertKernels {
 public:
  CudaExpertKernels(Device& dev, bool fusion) : dev_(dev), fusion_(fusion) {}

  void experts_per_slot(const ExpertShape& s, const ExpertPtrs* table, int64_t n_table, const int32_t* ids,
                        int64_t n_tokens, int32_t k, const float* x, float* y_slots,
                        Stream& stream) override {
    scratch(static_cast<size_t>(n_tokens) * static_cast<size_t>(k), s, stream);
    auto st = static_cast<cudaStream_t>(stream.native_handle());
    const ExpertPtrs* t = table;
    if (fusion_ && cuda::moe_grouped_applies(n_tokens, n_table)) {
      // A prompt batch grouped by table entry on the device: each slot expert's matrices read about
      // once per 8 of its pairs; the same bits as the two per-pair launches below.
      grow(group_, cuda::moe_grouped_scratch_bytes(n_tokens * k, n_table), "offload expert groups", stream);
      cuda::moe_grouped_slots(s.gate_type, s.down_type, t, n_table, ids, n_tokens, k, s.n_embd, s.n_ff, x, h_.f32(),
                              y_slots, group_.data(), group_.bytes(), st);
      return;
    }
    cuda::moe_gate_up_swiglu(s.gate_type, t, ids, n_tokens, k, s.n_embd, s.n_ff, x, h_.f32(), st);
    cuda::moe_down_slots(s.down_type, t, ids, n_tokens, k, s.n_embd, s.n_ff, h_.f32(), y_slots, st);
  }

  void experts_decode(const ExpertShape& s, const DecodeSlots& slots, int32_t k, const float* x,
                      float* y_slots, Stream& stream) override {
    if (k > DecodeSlots::kMaxSlots)
      fail(ErrorKind::invalid_arg, "cuda experts: a decode step of {} slots (at most {})", k,
           DecodeSlots::kMaxSlots);
    scratch(static_cast<size_t>(k), s, stream);
    cuda::moe_decode_slots(s.gate_type, s.down_type, slots, k, s.n_embd, s.n_ff, x, h_.f32(), y_slots,
                           static_cast<cudaStream_t>(stream.native_handle()));
  }

  // The gate/up launch and the down projections with the sum in one (cuda::moe_decode_sum).
  void experts_decode_sum(const ExpertShape& s, const DecodeSlots& slots, int32_t k, const float* x, float* y_slots,
                          const float* weights, float* out, Stream& stream) override {
    if (!fusion_ || k > DecodeSlots::kMaxSlots) {
      DeviceExpertKernels::experts_decode_sum(s, slots, k, x, y_slots, weights, out, stream);
      return;
    }
    scratch(static_cast<size_t>(k), s, stream);
    cuda::moe_decode_sum(s.gate_type, s.down_type, slots, k, s.n_embd, s.n_ff, x, h_.f32(), weights, out,
                         static_cast<cudaStream_t>(stream.native_handle()));
  }
  // The CPU rows read in place by the sum (cuda::moe_sum_rows): no scatter launch.
  void weighted_sum_rows(float* y_slots, const float* rows, const RowIndex& idx, int64_t n_rows, const float* weights,
                         int32_t k, int64_t n_embd, float* out, Stream& stream) override {
    if (!fusion_) {
      DeviceExpertKernels::weighted_sum_rows(y_slots, rows, idx, n_rows, weights, k, n_embd, out, stream);
      return;
    }
    cuda::moe_sum_rows(y_slots, rows, idx, n_rows, weights, k, n_embd, out,
                       static_cast<cudaStream_t>(stream.native_handle()));
  }

  void expert_pairs_per_slot(const ExpertShape& s, const ExpertPtrs* expert, const int32_t* pairs,
                             int64_t n_pairs, int32_t k, const float* x, float* y_slots,
                             Stream& stream) override {
    if (n_pairs == 0) return;
    scratch(static_cast<size_t>(n_pairs), s, stream);
    cuda::moe_expert_pairs_slots(s.gate_type, s.down_type,
                                 expert, pairs, n_pairs,
                                 k, s.n_embd, s.n_ff, x, h_.f32(), y_slots,
                                 static_cast<cudaStream_t>(stream.native_handle()));
  }

  void weighted_sum(const float* y_slots, const float* weights, int64_t n_tokens, int32_t k,
                    int64_t n_embd, float* out, Stream& stream) override {
    cuda::moe_sum(y_slots, weights, n_tokens, k, n_embd, out,
                  static_cast<cudaStream_t>(stream.native_handle()));
  }

  void scatter_rows(float* y_slots, const float* rows, const int32_t* idx, int64_t n,
                    int64_t n_embd, Stream& stream) override {
    cuda::moe_scatter_rows(rows, idx, n, n_embd, y_slots,
                           static_cast<cudaStream_t>(stream.native_handle()));
  }

  void scatter_rows(float* y_slots, const float* rows, const RowIndex& idx, int64_t n,
                    int64_t n_embd, Stream& stream) override {
    cuda::moe_scatter_rows(rows, idx, n, n_embd, y_slots,
                           static_cast<cudaStream_t>(stream.native_handle()));
  }

 private:
  // h: rows × n_ff floats.
  void scratch(size_t rows, const ExpertShape& s, Stream& stream) {
    if (s.gate_type != s.up_type)
      fail(ErrorKind::unsupported, "cuda experts: gate ({}) and up ({}) of different types", type_name(s.gate_type),
           type_name(s.up_type));
    grow(h_, rows * static_cast<size_t>(s.n_ff) * sizeof(float), "offload expert scratch", stream);
  }
  // Grown with the stream drained (queued kernels may read the old buffer).
  void grow(DeviceBuffer& buf, size_t bytes, const char* tag, Stream& stream) {
    if (bytes <= buf.bytes()) return;
    stream.synchronize();
    buf = DeviceBuffer();
    buf = dev_.alloc(bytes, tag);
  }

  Device& dev_;
  bool fusion_;
  DeviceBuffer h_;
  DeviceBuffer group_;  // a grouped step's tiles and pair order (cuda::moe_grouped_slots)
};

}  // namespace

std::unique_ptr<DeviceExpertKernels> make_cuda_expert_kernels(Device& dev, bool fusion) {
  if (dev.kind() != DeviceKind::cuda)
    fail(ErrorKind::invalid_arg, "cuda expert kernels on a {} device", device_kind_name(dev.kind()));
  return std::make_unique<CudaExpertKernels>(dev, fusion);
}

}  // namespace ferry

#else

namespace ferry {

std::unique_ptr<DeviceExpertKernels> make_cuda_expert_kernels(Device&, bool) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}

}  // namespace ferry

#endif
