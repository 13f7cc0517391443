// decide(): the offload engine's per-expert decision, every branch, from the expert's state, the
// cost model's rates and --cold.
#include <gtest/gtest.h>

#include "offload/decide.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

constexpr uint64_t kBytes = 2u << 20;  // a 35B-A3B expert at Q4_K

// Rates under which one source is clearly cheapest for a decode miss.
CostModel cpu_wins() {
  HardwareRates r;
  r.h2d_gbps = 0.5;  // copies cost milliseconds
  r.cpu_gbps = 50;
  r.mapped_gbps = 0.1;
  return CostModel(r);
}
CostModel copy_wins() {
  HardwareRates r;
  r.h2d_gbps = 50;
  r.cpu_gbps = 0.5;
  r.mapped_gbps = 0.1;
  return CostModel(r);
}
CostModel mapped_wins() {
  HardwareRates r;
  r.h2d_gbps = 0.5;
  r.cpu_gbps = 0.5;
  r.mapped_gbps = 500;
  return CostModel(r);
}

ExpertState state(Residence where, double remaining_us = 0) {
  return ExpertState{where, kBytes, remaining_us};
}
DecideContext ctx(ColdMode cold, int64_t n_tokens = 1, bool mapped_store = false) {
  return DecideContext{cold, n_tokens, n_tokens == 1, mapped_store};
}

TEST(Decide, AReadySlotIsAlwaysUsed) {
  for (ColdMode m : {ColdMode::auto_, ColdMode::cpu, ColdMode::copy, ColdMode::mapped})
    for (int64_t n : {1, 64})
      EXPECT_EQ(decide(state(Residence::ready), cpu_wins(), ctx(m, n, true)), Decision::slot);
}

TEST(Decide, ForcedModes) {
  // --cold cpu: every miss on the CPU, a prefetch in flight included.
  EXPECT_EQ(decide(state(Residence::absent), copy_wins(), ctx(ColdMode::cpu)), Decision::cpu);
  EXPECT_EQ(decide(state(Residence::in_flight, 1), copy_wins(), ctx(ColdMode::cpu)), Decision::cpu);
  EXPECT_EQ(decide(state(Residence::absent), copy_wins(), ctx(ColdMode::cpu, 64)), Decision::cpu);
  // --cold copy: wait for a prefetch, copy a decode miss now, stream a prefill group.
  EXPECT_EQ(decide(state(Residence::in_flight, 1e6), cpu_wins(), ctx(ColdMode::copy)),
            Decision::wait);
  EXPECT_EQ(decide(state(Residence::absent), cpu_wins(), ctx(ColdMode::copy)), Decision::copy_now);
  EXPECT_EQ(decide(state(Residence::absent), cpu_wins(), ctx(ColdMode::copy, 64)),
            Decision::stream);
  // --cold mapped: decode misses (in flight or not) read in place; prefill keeps the cost model.
  EXPECT_EQ(decide(state(Residence::absent), cpu_wins(), ctx(ColdMode::mapped)), Decision::mapped);
  EXPECT_EQ(decide(state(Residence::in_flight, 1), cpu_wins(), ctx(ColdMode::mapped)),
            Decision::mapped);
  EXPECT_EQ(decide(state(Residence::absent), cpu_wins(), ctx(ColdMode::mapped, 64)), Decision::cpu);
}

TEST(Decide, TheCostModelChooses) {
  EXPECT_EQ(decide(state(Residence::absent), cpu_wins(), ctx(ColdMode::auto_)), Decision::cpu);
  EXPECT_EQ(decide(state(Residence::absent), copy_wins(), ctx(ColdMode::auto_)),
            Decision::copy_now);
  EXPECT_EQ(decide(state(Residence::absent), copy_wins(), ctx(ColdMode::auto_, 64)),
            Decision::stream);
  // Reading in place only where the store is mapped, and only for decode.
  EXPECT_EQ(decide(state(Residence::absent), mapped_wins(), ctx(ColdMode::auto_, 1, true)),
            Decision::mapped);
  EXPECT_NE(decide(state(Residence::absent), mapped_wins(), ctx(ColdMode::auto_, 1, false)),
            Decision::mapped);
  EXPECT_NE(decide(state(Residence::absent), mapped_wins(), ctx(ColdMode::auto_, 64, true)),
            Decision::mapped);
  // A prefetch in flight: waiting costs only what is left of its copy.
  EXPECT_EQ(decide(state(Residence::in_flight, 0.0), cpu_wins(), ctx(ColdMode::auto_)),
            Decision::wait);
  EXPECT_EQ(decide(state(Residence::in_flight, 1e9), cpu_wins(), ctx(ColdMode::auto_)),
            Decision::cpu);
  EXPECT_EQ(decide(state(Residence::in_flight, 1e9), mapped_wins(), ctx(ColdMode::auto_, 1, true)),
            Decision::mapped);
}

TEST(Decide, ParsesColdModes) {
  EXPECT_EQ(parse_named(kColdModes, "auto", "--cold"), ColdMode::auto_);
  EXPECT_EQ(parse_named(kColdModes, "mapped", "--cold"), ColdMode::mapped);
  EXPECT_STREQ(name_of(kColdModes, ColdMode::copy), "copy");
  try {
    parse_named(kColdModes, "fast", "--cold");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cold 'fast': expected auto, cpu, copy or mapped"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
