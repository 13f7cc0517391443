#include "offload/decide.hpp"

#include "runtime/core/error.hpp"

namespace ferry {

const char* decision_name(Decision d) {
  switch (d) {
    case Decision::slot:
      return "slot";
    case Decision::wait:
      return "wait";
    case Decision::mapped:
      return "mapped";
    case Decision::cpu:
      return "cpu";
    case Decision::stream:
      return "stream";
    case Decision::copy_now:
      return "copy_now";
  }
  return "?";
}

Decision decide(const ExpertState& s, const CostModel& cost, const DecideContext& c) {
  if (s.where == Residence::ready) return Decision::slot;
  // --cold mapped forces in-place reads for decode; auto may choose them where the store is mapped.
  if (c.cold == ColdMode::mapped && c.decode) return Decision::mapped;
  const bool map_ok = c.cold == ColdMode::auto_ && c.decode && c.mapped_store;
  if (s.where == Residence::in_flight) {
    if (c.cold == ColdMode::cpu) return Decision::cpu;
    if (c.cold == ColdMode::copy) return Decision::wait;
    switch (cost.choose(s.bytes, c.n_tokens, s.copy_remaining_us, 0, map_ok)) {
      case ColdChoice::mapped:
        return Decision::mapped;
      case ColdChoice::cpu:
        return Decision::cpu;
      default:
        return Decision::wait;
    }
  }
  const ColdChoice choice = c.cold == ColdMode::cpu ? ColdChoice::cpu
                            : c.cold == ColdMode::copy
                                ? ColdChoice::copy_now
                                : cost.choose(s.bytes, c.n_tokens, -1, 0, map_ok);
  switch (choice) {
    case ColdChoice::mapped:
      return Decision::mapped;
    case ColdChoice::copy_now:
      return c.n_tokens > 1 ? Decision::stream : Decision::copy_now;
    default:
      return Decision::cpu;
  }
}

}  // namespace ferry
