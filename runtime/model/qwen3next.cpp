// qwen3next (Qwen3-Next-80B-A3B): the hybrid model of qwen35moe.cpp with two differences, both in
// the DeltaNet blocks (llama.cpp's llama_model_qwen3next):
//   - β and α come from one fused projection ssm_ba whose rows are grouped per key head g:
//     [β of value heads g·r .. g·r+r−1 | α of the same heads], r = H_v / H_k;
//   - value head h reads key head h / r (torch repeat_interleave), where qwen35moe uses h mod H_k.
// Older files fuse the DeltaNet input projections into one ssm_in grouped per key head; the loader
// regroups its rows into the attn_qkv / attn_gate layout (qwen35moe.cpp, split_legacy_ssm_in).
// Its attention blocks use plain NEOX RoPE on the first n_rot dims, which is what qwen35moe's
// multi-section RoPE reduces to for text positions: the forward is shared.
#include "runtime/model/qwen35moe.hpp"
#include "runtime/model/qwen35moe_internal.hpp"

namespace ferry {
namespace hybrid {

void gates_grouped(const GdnContext& ctx, const Layer& L, State& st, int64_t nb) {
  const int32_t Hk = ctx.dims.n_k_heads, Hv = ctx.dims.n_v_heads, r = Hv / Hk;
  const float* ba = st.ba.f32();  // (nb, 2·H_v)
  for (int32_t grp = 0; grp < Hk; ++grp) {
    const int64_t src = int64_t{grp} * 2 * r, dst = int64_t{grp} * r;
    ctx.gdn.gates(ba + src, 2 * Hv, ba + src + r, 2 * Hv, L.gdn.dt_bias + dst, L.gdn.ssm_a + dst,
                  st.beta.f32() + dst, st.g.f32() + dst, Hv, nb, r);
  }
}

}  // namespace hybrid

std::unique_ptr<Model> make_qwen3next(const gguf::File& f, ModelConfig cfg, Ops& ops,
                                      const MoeExecutorFactory& moe, const LoadProgress& progress) {
  return hybrid::make_hybrid(f, std::move(cfg), ops, moe, progress, hybrid::GateLayout::grouped,
                             cpu::GdnKeyHeadMap::grouped);
}

}  // namespace ferry
