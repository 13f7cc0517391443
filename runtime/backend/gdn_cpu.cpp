// GdnOps on the CPU: host buffers, calls into kernels/cpu/gdn with SiLU rounded as ggml does.
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/backend/gdn_ops.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

class CpuGdnOps final : public GdnOps {
 public:
  explicit CpuGdnOps(cpu::GdnPrefill long_batches) : long_batches_(long_batches) {}
  void conv_silu(const float* x, int64_t ldx, const float* w, int32_t kernel, float* state,
                 float* y, int64_t ldy, int64_t n_tokens, int64_t n_ch) override {
    cpu::gdn_conv_silu(x, ldx, w, kernel, state, y, ldy, n_tokens, n_ch, cpu_math::silu);
  }
  void l2_norm_heads(float* x, int64_t ld, int64_t n_tokens, int32_t n_heads, int32_t dim,
                     float eps) override {
    cpu::gdn_l2_norm_heads(x, ld, n_tokens, n_heads, dim, eps);
  }
  void gates(const float* b, int64_t ldb, const float* a, int64_t lda, const float* dt_bias,
             const float* ssm_a, float* beta, float* g, int64_t ld_out, int64_t n_tokens,
             int32_t n_heads) override {
    cpu::gdn_gates(b, ldb, a, lda, dt_bias, ssm_a, beta, g, ld_out, n_tokens, n_heads);
  }
  void delta_rule(const cpu::GdnShape& shape, const cpu::GdnInputs& in, int64_t n_tokens,
                  float scale, float* state, float* out, int64_t ldo) override {
    cpu::gdn_delta_rule(shape, in, n_tokens, scale, state, out, ldo, long_batches_);
  }
  void gated_rms_norm(const float* o, int64_t ldo, const float* z, int64_t ldz, const float* w,
                      float* out, int64_t ldout, int64_t n_tokens, int32_t n_heads, int32_t dim,
                      float eps) override {
    cpu::gdn_gated_rms_norm(o, ldo, z, ldz, w, out, ldout, n_tokens, n_heads, dim, eps,
                            cpu_math::silu);
  }

 private:
  cpu::GdnPrefill long_batches_;
};

}  // namespace

std::unique_ptr<GdnOps> make_cpu_gdn_ops(cpu::GdnPrefill long_batches) {
  return std::make_unique<CpuGdnOps>(long_batches);
}

std::unique_ptr<GdnOps> CpuOps::make_gdn_ops() {
  return make_cpu_gdn_ops(options_.gdn_prefill);
}
}  // namespace ferry
