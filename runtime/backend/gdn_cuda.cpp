#include "runtime/backend/gdn_cuda.hpp"

#include "runtime/core/error.hpp"

#if FERRY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cpu/gdn.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/deltanet.cuh"
#include "runtime/backend/cuda_ops.hpp"

namespace ferry {
namespace {

// Shapes and strides pass through unchanged: the CUDA kernels take the CPU kernels' layouts
// (state (H_v, S, S) key-major, token strides in floats), which tests/gpu/test_gpu_deltanet.cpp
// checks against kernels/cpu/gdn.
class CudaGdnOps final : public GdnOps {
 public:
  CudaGdnOps(Ops& ops, cpu::GdnPrefill long_batches)
      : ops_(ops), s_(static_cast<cudaStream_t>(cuda_ops_stream(ops))), prefill_(long_batches),
        fusion_(cuda_ops_fusion(ops)) {
    if (fusion_) {
      counters_ = cuda_ops_device(ops).alloc(kMaxNormHeads * sizeof(unsigned), "gdn norm counters");
      FERRY_CUDA_CHECK(cudaMemsetAsync(counters_.data(), 0, counters_.bytes(), s_));
    }
  }

  void conv_silu(const float* x, int64_t ldx, const float* w, int32_t kernel, float* state,
                 float* y, int64_t ldy, int64_t n_tokens, int64_t n_ch) override {
    cuda::gdn_conv_silu(x, ldx, w, kernel, state, y, ldy, n_tokens, n_ch, s_);
  }
  void l2_norm_heads(float* x, int64_t ld, int64_t n_tokens, int32_t n_heads, int32_t dim,
                     float eps) override {
    cuda::l2norm_heads(x, ld, n_tokens, n_heads, dim, eps, s_);
  }
  // One token with its gates: the three ops in one launch (cuda::gdn_decode_prep).
  void conv_l2_gates(const GdnPrep& p, int64_t n_tokens) override {
    if (!fusion_ || n_tokens != 1 || !p.b || p.dim <= 0 || p.n_ch % p.dim != 0) {
      GdnOps::conv_l2_gates(p, n_tokens);
      return;
    }
    cuda::GdnDecodePrep c;
    c.x = p.x;
    c.w = p.w;
    c.kernel = p.kernel;
    c.state = p.state;
    c.y = p.y;
    c.n_ch = p.n_ch;
    c.n_l2_heads = p.n_l2_heads;
    c.dim = p.dim;
    c.eps = p.eps;
    c.b = p.b;
    c.a = p.a;
    c.dt_bias = p.dt_bias;
    c.ssm_a = p.ssm_a;
    c.beta = p.beta;
    c.g = p.g;
    c.n_heads = p.n_heads;
    cuda::gdn_decode_prep(c, s_);
  }
  void gates(const float* b, int64_t ldb, const float* a, int64_t lda, const float* dt_bias,
             const float* ssm_a, float* beta, float* g, int64_t ld_out, int64_t n_tokens,
             int32_t n_heads) override {
    cuda::gdn_gates(b, ldb, a, lda, dt_bias, ssm_a, beta, g, ld_out, n_tokens, n_heads, s_);
  }
  void delta_rule(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens,
                  float scale, float* state, float* out, int64_t ldo) override {
    const cuda::GdnArgs a = rule_args(shape, in, n_tokens, scale, state, out, ldo);
    // Decode (one token, recorded into step graphs) always takes the recurrent kernel, which needs
    // no scratch; CudaOpsOptions::gdn_prefill = recurrent keeps it for prefill too.
    if (recurrent(n_tokens)) {
      cuda::gdn_delta_rule(a, s_);
      return;
    }
    // Scratch shared by all layers (they run in order on s_), grown when a larger batch comes; the
    // stream is drained first because queued kernels may still read the old buffer.
    cuda_ops_grow(ops_, scratch_, cuda::gdn_chunked_scratch_bytes(a), "gdn chunked scratch");
    cuda::gdn_delta_rule_chunked(a, scratch_.f32(), s_);
  }
  // The recurrent kernel normalises each head's output in its last block (GdnArgs::counters).
  void delta_rule_gated_norm(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens, float scale,
                             float* state, float* out, int64_t ldo, const float* z, int64_t ldz, const float* w,
                             float eps) override {
    if (!fusion_ || !recurrent(n_tokens) || shape.n_v_heads > kMaxNormHeads) {
      GdnOps::delta_rule_gated_norm(shape, in, n_tokens, scale, state, out, ldo, z, ldz, w, eps);
      return;
    }
    cuda::GdnArgs a = rule_args(shape, in, n_tokens, scale, state, out, ldo);
    a.z = z;
    a.ldz = ldz;
    a.norm_w = w;
    a.eps = eps;
    a.counters = static_cast<unsigned*>(counters_.data());
    cuda::gdn_delta_rule(a, s_);
  }
  void gated_rms_norm(const float* o, int64_t ldo, const float* z, int64_t ldz, const float* w,
                      float* out, int64_t ldout, int64_t n_tokens, int32_t n_heads, int32_t dim,
                      float eps) override {
    cuda::rmsnorm_gated_heads(o, ldo, z, ldz, w, out, ldout, n_tokens, n_heads, dim, eps, s_);
  }

 private:
  Ops& ops_;
  cudaStream_t s_;
  cpu::GdnPrefill prefill_;  // the form for batches of kGdnChunkedMinTokens or more
  // The recurrent form: decode and short batches (and every batch with --gdn-prefill recurrent).
  bool recurrent(int64_t n_tokens) const {
    return n_tokens < cuda::kGdnChunkedMinTokens || prefill_ == cpu::GdnPrefill::recurrent;
  }
  static cuda::GdnArgs rule_args(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens,
                                 float scale, float* state, float* out, int64_t ldo) {
    cpu::gdn_check_shape(shape);
    cuda::GdnArgs a;
    a.n_k_heads = shape.n_k_heads;
    a.n_v_heads = shape.n_v_heads;
    a.head_dim = shape.head_dim;
    a.key_head_tiled = shape.key_map == cpu::GdnKeyHeadMap::tiled;
    a.q = in.q;
    a.ldq = in.ldq;
    a.k = in.k;
    a.ldk = in.ldk;
    a.v = in.v;
    a.ldv = in.ldv;
    a.g = in.g;
    a.beta = in.beta;
    a.state = state;
    a.out = out;
    a.ldo = ldo;
    a.n_tokens = n_tokens;
    a.scale = scale;
    return a;
  }

  static constexpr int32_t kMaxNormHeads = 1024;  // value heads the fused rule + norm takes
  bool fusion_;              // CudaOpsOptions::fusion of the ops
  DeviceBuffer scratch_;     // gdn_chunked_scratch_bytes of the largest chunked call so far
  DeviceBuffer counters_;    // (kMaxNormHeads) the fused norm's per-head block counts, 0 between launches
};

}  // namespace

std::unique_ptr<GdnOps> make_cuda_gdn_ops(Ops& ops, cpu::GdnPrefill long_batches) {
  return std::make_unique<CudaGdnOps>(ops, long_batches);
}

uint64_t cuda_gdn_scratch_bytes(int32_t n_k_heads, int32_t n_v_heads, int32_t head_dim, int64_t n_batch) {
  if (head_dim <= 0 || n_v_heads <= 0 || n_batch < cuda::kGdnChunkedMinTokens) return 0;
  cuda::GdnArgs a;
  a.n_k_heads = n_k_heads;
  a.n_v_heads = n_v_heads;
  a.head_dim = head_dim;
  a.n_tokens = n_batch;
  return cuda::gdn_chunked_scratch_bytes(a);
}

}  // namespace ferry

#else

namespace ferry {

std::unique_ptr<GdnOps> make_cuda_gdn_ops(Ops&, cpu::GdnPrefill) {
  fail(ErrorKind::unsupported, "this Ferry was built without CUDA (configure with -DFERRY_CUDA=ON)");
}

uint64_t cuda_gdn_scratch_bytes(int32_t, int32_t, int32_t, int64_t) { return 0; }

}  // namespace ferry

#endif
