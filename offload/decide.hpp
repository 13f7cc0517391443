#pragma once
// The offload engine's decision for one expert of one MoE step, as a pure function of where the
// expert is, the cost model and the --cold mode. The executor looks the state up (expert cache,
// prefetcher), asks decide(), and carries the answer out (pins, waits, copies, counters,
// admissions); nothing here touches a device or a counter, so every branch is unit-tested
// (tests/offload/test_decide.cpp).
//
//   slot      a ready VRAM slot holds it: compute from the slot
//   wait      its prefetch is in flight and waiting is cheapest: wait for the copy, then the slot
//   mapped    read it in place from the mapped pinned host store (decode; --cold mapped, or the
//             cost model's choice where the in-place read rate is known)
//   cpu       compute it on the CPU from the host store
//   stream    prefill: copy it through a staging slot, overlapped with the step's other experts
//   copy_now  decode: copy it into a slot now and compute it there (the executor computes it on
//             the CPU instead when no slot can be evicted)
#include <cstdint>

#include "offload/cost_model.hpp"
#include "offload/offload.hpp"

namespace ferry {

// auto_: the cost model decides; others force a path. mapped (device flow only): a decode miss is
// read by the device kernels in place from the pinned host store over the link (no slot, no
// copy), and admitted behind as with cpu; prefill keeps the cost model (reading in place costs the
// link once per token there).

enum class Residence { ready, in_flight, absent };

struct ExpertState {
  Residence where = Residence::absent;
  uint64_t bytes = 0;              // gate + up + down
  double copy_remaining_us = 0.0;  // in_flight: what is left of the prefetch's copy (estimated)
};

struct DecideContext {
  ColdMode cold = ColdMode::auto_;
  int64_t n_tokens = 1;       // the expert's tokens in this step (the cost model's batch)
  bool decode = true;         // a one-token step
  bool mapped_store = false;  // the device can read the host store in place
};

enum class Decision { slot, wait, mapped, cpu, stream, copy_now };
const char* decision_name(Decision d);

Decision decide(const ExpertState& s, const CostModel& cost, const DecideContext& c);

}  // namespace ferry
