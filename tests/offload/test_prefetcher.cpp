// The prefetcher's in-flight bookkeeping on the sim device: poll() visits only the slots with a
// copy in flight (a list kept in slot order), so every admitted copy must come back through it or
// through wait(slot), and the in-flight limit must free up exactly as copies settle. Copies are
// checked only after the device has synchronised, so the outcome does not depend on timing.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "offload/prefetcher.hpp"
#include "runtime/backend/sim_device.hpp"

namespace ferry {
namespace {

constexpr int32_t kLayers = 2, kExperts = 8, kSlots = 8, kMaxInFlight = 3;
constexpr size_t kExpertBytes = 256;

struct Rig {
  std::unique_ptr<Device> dev = make_sim_device(DeviceOptions{});
  ExpertCache cache{kSlots, kLayers, kExperts, EvictionPolicy::lru};
  std::vector<uint8_t> host = std::vector<uint8_t>(kLayers * kExperts * kExpertBytes);
  DeviceBuffer slots = dev->alloc(kSlots * kExpertBytes, "test slots");
  Prefetcher pf{*dev, cache,
                [this](int32_t slot, int32_t l, int32_t e, Stream& s) {
                  s.copy_h2d(static_cast<uint8_t*>(slots.data()) + slot * kExpertBytes,
                             host.data() + (l * kExperts + e) * kExpertBytes, kExpertBytes);
                },
                std::vector<uint64_t>(kLayers, kExpertBytes), kMaxInFlight};
  Rig() {
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i / kExpertBytes + 1);
  }
  uint64_t dropped() const { return pf.counters().snapshot().count(Count::admit_dropped); }
  // The slot holds its expert's bytes, is ready and unpinned, and no copy is in flight.
  void expect_settled(int32_t l, int32_t e) {
    const int32_t slot = cache.find(l, e);
    ASSERT_GE(slot, 0) << "layer " << l << " expert " << e;
    EXPECT_FALSE(pf.in_flight(slot));
    EXPECT_EQ(cache.state(slot), SlotState::ready);
    EXPECT_EQ(cache.pins(slot), 0);
    EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(slots.data()) + slot * kExpertBytes,
                          host.data() + (l * kExperts + e) * kExpertBytes, kExpertBytes),
              0);
  }
};

TEST(Prefetcher, PollSettlesEveryAdmittedCopyAndFreesTheLimit) {
  Rig r;
  // Slots 0-1 taken first, so the admissions below land in slots out of issue order later.
  for (int32_t e = 0; e < 2; ++e) r.cache.mark_ready(r.cache.insert(0, e, 0));
  for (int32_t e = 2; e < 2 + kMaxInFlight; ++e) r.pf.admit(1, e, 1);
  r.pf.admit(1, 7, 1);  // over the limit: dropped, not issued
  EXPECT_EQ(r.dropped(), 1u);
  EXPECT_LT(r.cache.find(1, 7), 0);
  r.dev->synchronize();
  r.pf.poll();
  for (int32_t e = 2; e < 2 + kMaxInFlight; ++e) r.expect_settled(1, e);
  // Nothing is left in flight: the whole limit is free again.
  for (int32_t e = 5; e < 5 + kMaxInFlight; ++e) r.pf.admit(0, e, 2);
  EXPECT_EQ(r.dropped(), 1u);
  r.dev->synchronize();
  r.pf.poll();
  for (int32_t e = 5; e < 5 + kMaxInFlight; ++e) r.expect_settled(0, e);
}

TEST(Prefetcher, WaitSettlesOneSlotAndPollTheRest) {
  Rig r;
  for (int32_t e = 0; e < kMaxInFlight; ++e) r.pf.admit(0, e, 1);
  const int32_t middle = r.cache.find(0, 1);
  r.pf.wait(middle);  // only this one leaves the in-flight list
  r.expect_settled(0, 1);
  r.pf.admit(1, 0, 1);  // one place free
  r.pf.admit(1, 1, 1);  // none
  EXPECT_EQ(r.dropped(), 1u);
  r.dev->synchronize();
  r.pf.poll();
  for (const auto& [l, e] : {std::pair{0, 0}, {0, 1}, {0, 2}, {1, 0}}) r.expect_settled(l, e);
  r.pf.poll();  // a second poll finds nothing in flight and changes nothing
  r.expect_settled(1, 0);
}

}  // namespace
}  // namespace ferry
