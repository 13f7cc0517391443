#include "runtime/moe/step.hpp"

#include "runtime/core/error.hpp"

namespace ferry {

bool ObserverSet::wants_x() const {
  for (const MoeObserver* o : list_)
    if (o->wants_x()) return true;
  return false;
}

void ObserverSet::routing(const MoeStep& s) const {
  routing(RoutingView{s.layer, s.n_tokens, s.top_k, s.n_embd, s.expert_ids, s.expert_weights, s.x,
                      true});
}

void check_step(const MoeStep& s, const std::vector<MoeLayerWeights>& layers, const char* who) {
  if (s.layer < 0 || static_cast<size_t>(s.layer) >= layers.size())
    fail(ErrorKind::internal, "{}: MoE step for layer {}, the executor has {} layers", who, s.layer,
         layers.size());
  const int64_t n_embd = layers[static_cast<size_t>(s.layer)].gate.n_in;
  if (s.n_embd != n_embd)
    fail(ErrorKind::internal, "{}: MoE step layer {}: n_embd {} but the experts take {}", who,
         s.layer, s.n_embd, n_embd);
  if (s.top_k <= 0 || s.n_tokens < 0)
    fail(ErrorKind::internal, "{}: MoE step layer {}: top_k {} n_tokens {}", who, s.layer, s.top_k,
         s.n_tokens);
}

void check_step_ids(const MoeStep& s, int32_t n_expert, const char* who) {
  for (int64_t i = 0; i < int64_t{s.n_tokens} * s.top_k; ++i)
    if (s.expert_ids[i] < 0 || s.expert_ids[i] >= n_expert)
      fail(ErrorKind::internal, "{}: MoE step layer {}: expert id {} outside [0, {})", who, s.layer,
           s.expert_ids[i], n_expert);
}

}  // namespace ferry
