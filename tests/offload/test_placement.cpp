// Placement: slot counts from the budget, budget errors that say what is missing, hot sets from
// profiles (and their file format), and the host store's reads (io_uring and mmap) against the
// file bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "offload/host_store.hpp"
#include "offload/placement.hpp"
#include "offload_test_util.hpp"
#include "runtime/backend/sim_device.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

PlacementInput qwen3_like() {
  PlacementInput in;
  in.model = "m.gguf";
  in.n_layer = 48;
  in.n_expert = 128;
  in.n_expert_used = 8;
  in.layer_expert_bytes.assign(48, 1769472 + 100);  // not a multiple of 256 (nor of 16)
  in.dense_bytes = 1400ull << 20;
  in.kv_bytes = 384ull << 20;
  in.workspace_bytes = 64ull << 20;
  in.n_ctx = 4096;
  in.kv_types = "f16/f16";
  in.budget_bytes = 8ull << 30;
  return in;
}

TEST(Placement, SlotsFillWhatRemains) {
  const Plan p = make_plan(qwen3_like());
  ASSERT_EQ(p.classes.size(), 1u);
  const uint64_t slot = p.classes[0].expert_bytes;
  EXPECT_EQ(slot, 1769472u + 100u);  // exactly the expert: no padding
  EXPECT_EQ(p.staging_slot_bytes % 256, 0u);
  EXPECT_GE(p.staging_slot_bytes, slot);
  EXPECT_EQ(p.slots_bytes(), slot * static_cast<uint64_t>(p.n_slots));
  EXPECT_LE(p.total_bytes(), p.in.budget_bytes);
  // One more slot would not fit (the arena is one allocation in 256-byte units).
  EXPECT_GT(p.fixed_bytes() + (slot * static_cast<uint64_t>(p.n_slots + 1) + 255) / 256 * 256,
            p.in.budget_bytes);
  const int64_t placed =
      std::accumulate(p.hot.begin(), p.hot.end(), int64_t{0},
                      [](int64_t a, const auto& h) { return a + static_cast<int64_t>(h.size()); });
  EXPECT_EQ(placed, p.n_slots);
  // Uniform: layers differ by at most one slot; ids are distinct and in range.
  size_t lo = SIZE_MAX, hi = 0;
  for (const auto& h : p.hot) {
    lo = std::min(lo, h.size());
    hi = std::max(hi, h.size());
    EXPECT_TRUE(std::is_sorted(h.begin(), h.end()));
    EXPECT_EQ(std::adjacent_find(h.begin(), h.end()), h.end());
    for (int32_t e : h) EXPECT_TRUE(e >= 0 && e < 128);
  }
  EXPECT_LE(hi - lo, 1u);
  const std::string text = plan_text(p);
  EXPECT_NE(text.find("expert slots"), std::string::npos);
  EXPECT_NE(text.find("experts resident"), std::string::npos);
  const auto j = nlohmann::json::parse(plan_json(p));
  EXPECT_EQ(j["n_slots"].get<int32_t>(), p.n_slots);
  EXPECT_EQ(j["total_bytes"].get<uint64_t>(), p.total_bytes());
}

TEST(Placement, NoBudgetMeansEveryExpert) {
  PlacementInput in = qwen3_like();
  in.budget_bytes = 0;
  const Plan p = make_plan(in);
  EXPECT_EQ(p.n_slots, 48 * 128);
  EXPECT_DOUBLE_EQ(p.resident_fraction(), 1.0);
  in.budget_bytes = 1ull << 40;  // larger than everything: capped at the expert count
  EXPECT_EQ(make_plan(in).n_slots, 48 * 128);
}

TEST(Placement, TooSmallSaysWhatIsMissing) {
  PlacementInput in = qwen3_like();
  in.budget_bytes = 1ull << 30;
  try {
    (void)make_plan(in);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    const std::string m = e.what();
    EXPECT_NE(m.find("missing"), std::string::npos) << m;
    EXPECT_NE(m.find("-c"), std::string::npos) << m;
    EXPECT_NE(m.find("--vram"), std::string::npos) << m;
    EXPECT_NE(m.find("-ctk"), std::string::npos) << m;
  }
  // Exactly the fixed part plus top_k slots fits; one byte less does not.
  in.layer_expert_bytes.assign(48, 1769472);  // a 256-byte multiple
  in.budget_bytes = 0;
  const Plan probe = make_plan(in);
  in.budget_bytes = probe.fixed_bytes() + 8 * 1769472;
  EXPECT_EQ(make_plan(in).n_slots, 8);
  in.budget_bytes -= 1;
  EXPECT_THROW((void)make_plan(in), Error);
}

TEST(Placement, ProfileChoosesTheHotSetAndRoundTrips) {
  PlacementInput in = qwen3_like();
  in.n_layer = 3;
  in.n_expert = 16;
  in.n_expert_used = 2;
  in.dense_bytes = 0;
  in.kv_bytes = 0;
  in.workspace_bytes = 0;
  in.layer_expert_bytes.assign(3, 1769472);
  const Plan probe = make_plan([&] {
    auto x = in;
    x.budget_bytes = 0;
    return x;
  }());
  in.budget_bytes = probe.fixed_bytes() + 12 * 1769472;  // 12 of 48 experts
  ExpertProfile prof(3, 16);
  std::mt19937 rng(5);
  std::vector<int32_t> ids(2);
  for (int t = 0; t < 400; ++t)
    for (int32_t l = 0; l < 3; ++l) {
      // Layer l prefers experts l, l+1, l+2, l+3 (80%), else uniform.
      ids[0] =
          (rng() % 10 < 8) ? l + static_cast<int32_t>(rng() % 4) : static_cast<int32_t>(rng() % 16);
      do ids[1] = static_cast<int32_t>(rng() % 16);
      while (ids[1] == ids[0]);
      prof.add(l, ids.data(), 1, 2);
    }
  EXPECT_EQ(prof.tokens(), 400u);
  const std::string path = test::scratch_dir() + "/profile.json";
  prof.write(path);
  const ExpertProfile back = ExpertProfile::read(path);
  for (int32_t l = 0; l < 3; ++l)
    for (int32_t e = 0; e < 16; ++e) EXPECT_EQ(back.count(l, e), prof.count(l, e));
  const Plan p = make_plan(in, &back, path);
  EXPECT_EQ(p.n_slots, 12);
  for (int32_t l = 0; l < 3; ++l)
    for (int32_t e = l; e < l + 4; ++e)
      EXPECT_NE(
          std::find(p.hot[static_cast<size_t>(l)].begin(), p.hot[static_cast<size_t>(l)].end(), e),
          p.hot[static_cast<size_t>(l)].end())
          << "layer " << l << " expert " << e;
  // Shape mismatch and malformed files.
  ExpertProfile other(4, 16);
  EXPECT_THROW((void)make_plan(in, &other, "x"), Error);
  for (const char* bad :
       {"[]",
        "{\"format\":\"ferry-expert-profile\",\"version\":1,\"n_layer\":1,\"n_expert\":2,"
        "\"tokens\":1,\"counts\":[[1]]}",
        "{\"format\":\"nope\"}", "not json"}) {
    std::ofstream(path) << bad;
    EXPECT_THROW((void)ExpertProfile::read(path), Error) << bad;
  }
  EXPECT_THROW((void)ExpertProfile::read(path + ".missing"), Error);
}

// Slot size classes: a Q4_K_M-like model where 4 of 8 layers have Q6_K downs (larger experts).
PlacementInput mixed() {
  PlacementInput in;
  in.model = "mixed.gguf";
  in.n_layer = 8;
  in.n_expert = 48;
  in.n_expert_used = 8;
  const uint64_t small = 2 * 589824 + 589824, large = 2 * 589824 + 860160;  // Q4_K/Q4_K/{Q4_K,Q6_K}
  for (int32_t l = 0; l < 8; ++l)
    in.layer_expert_bytes.push_back(l == 0 || l == 3 || l >= 6 ? large : small);
  in.dense_bytes = 600ull << 20;
  in.kv_types = "f16/f16";
  in.budget_bytes = (600ull << 20) + 2 * 2039808 + 200 * small;
  return in;
}

size_t hot_count(const Plan& p) {
  size_t n = 0;
  for (const auto& h : p.hot) n += h.size();
  return n;
}

TEST(Placement, SizeClassesPackWithoutPadding) {
  const PlacementInput in = mixed();
  const Plan p = make_plan(in);
  ASSERT_EQ(p.classes.size(), 2u);
  EXPECT_EQ(p.classes[0].expert_bytes, in.layer_expert_bytes[0]);  // largest first
  EXPECT_EQ(p.classes[0].layers, (std::vector<int32_t>{0, 3, 6, 7}));
  EXPECT_EQ(p.classes[1].layers, (std::vector<int32_t>{1, 2, 4, 5}));
  for (int32_t l = 0; l < 8; ++l)
    EXPECT_EQ(p.classes[static_cast<size_t>(p.class_of_layer[static_cast<size_t>(l)])].expert_bytes,
              in.layer_expert_bytes[static_cast<size_t>(l)]);
  // No padding: the arena is exactly Σ count · class bytes, within the budget's share for slots.
  uint64_t sum = 0;
  int32_t slots = 0;
  for (const SlotClass& c : p.classes) {
    EXPECT_EQ(c.first_slot, slots);
    EXPECT_EQ(c.offset_bytes, sum);
    sum += static_cast<uint64_t>(c.n_slots) * c.expert_bytes;
    slots += c.n_slots;
  }
  EXPECT_EQ(p.slots_bytes(), sum);
  EXPECT_EQ(p.n_slots, slots);
  EXPECT_EQ(hot_count(p), static_cast<size_t>(p.n_slots));
  EXPECT_LE(sum, in.budget_bytes - p.fixed_bytes());
  EXPECT_LE(p.total_bytes(), in.budget_bytes);
  // Staging: two slots of the largest expert.
  EXPECT_GE(p.staging_slot_bytes, p.classes[0].expert_bytes);
  EXPECT_EQ(p.staging_bytes, 2 * p.staging_slot_bytes);
  // More experts than the largest-size slots of the old plan would hold in the same bytes.
  EXPECT_GT(p.n_slots,
            static_cast<int32_t>((in.budget_bytes - p.fixed_bytes()) / p.classes[0].expert_bytes));
  // Uniform: the same share of every layer (±1), whatever its class.
  size_t lo = SIZE_MAX, hi = 0;
  for (const auto& h : p.hot) lo = std::min(lo, h.size()), hi = std::max(hi, h.size());
  EXPECT_LE(hi - lo, 1u);
  // Slot lookups: every slot maps into its class's region, back to back.
  for (int32_t s = 0; s < p.n_slots; ++s) {
    const SlotClass& c = p.classes[static_cast<size_t>(p.class_of_slot(s))];
    EXPECT_GE(s, c.first_slot);
    EXPECT_LT(s, c.first_slot + c.n_slots);
    EXPECT_EQ(p.slot_offset(s),
              c.offset_bytes + static_cast<uint64_t>(s - c.first_slot) * c.expert_bytes);
  }
  EXPECT_THROW((void)p.class_of_slot(p.n_slots), Error);
  const SlotPartition part = p.slot_partition();
  EXPECT_EQ(part.layer_group, p.class_of_layer);
  EXPECT_EQ(part.group_slots, (std::vector<int32_t>{p.classes[0].n_slots, p.classes[1].n_slots}));
  // Text and JSON show each class.
  const std::string text = plan_text(p);
  EXPECT_NE(text.find("layers 0,3,6-7"), std::string::npos) << text;
  EXPECT_NE(text.find("layers 1-2,4-5"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(plan_json(p));
  ASSERT_EQ(j["classes"].size(), 2u);
  EXPECT_EQ(j["classes"][1]["n_slots"].get<int32_t>(), p.classes[1].n_slots);
  EXPECT_EQ(j["classes"][0]["expert_bytes"].get<uint64_t>(), p.classes[0].expert_bytes);
  EXPECT_EQ(j["classes"][0]["layers"].get<std::vector<int32_t>>(), p.classes[0].layers);
  EXPECT_EQ(j["slots_bytes"].get<uint64_t>(), sum);
}

TEST(Placement, ProfileTakesTheHottestExpertsAcrossClasses) {
  PlacementInput in = mixed();
  // Layers 1 and 2 (small experts) route everything to 12 experts each, layer 0 (large) to 40;
  // the others are uniform.
  ExpertProfile prof(8, 48);
  std::vector<int32_t> ids(1);
  for (int t = 0; t < 480; ++t)
    for (int32_t l = 0; l < 8; ++l) {
      ids[0] = l == 1 || l == 2 ? t % 12 : l == 0 ? t % 40 : t % 48;
      prof.add(l, ids.data(), 1, 1);
    }
  const Plan p = make_plan(in, &prof, "prof");
  EXPECT_EQ(p.hot_source, "profile prof");
  // The 24 most used experts (share 1/12) first, then layer 0's 40 (1/40), then the 1/48 ones.
  EXPECT_EQ(p.hot[1].size(), 12u);
  EXPECT_EQ(p.hot[2].size(), 12u);
  EXPECT_EQ(p.hot[0].size(), 40u);
  for (int32_t e = 0; e < 12; ++e) EXPECT_EQ(p.hot[1][static_cast<size_t>(e)], e);
  // Never an expert with no uses while a used one of the same layer is left out.
  for (int32_t e : p.hot[0]) EXPECT_LT(e, 40);
  // Greedy: what is left after the last large expert that fits is filled with small ones.
  const uint64_t left = in.budget_bytes - p.fixed_bytes() - p.slots_bytes();
  EXPECT_LT(left, p.classes[1].expert_bytes);
  EXPECT_EQ(hot_count(p), static_cast<size_t>(p.n_slots));
  EXPECT_LE(p.total_bytes(), in.budget_bytes);
}

TEST(Placement, AClassCanGetNoSlots) {
  PlacementInput in = mixed();
  // Only layers 1, 2, 4, 5 (small class) are ever used: the large class gets nothing.
  ExpertProfile prof(8, 48);
  std::vector<int32_t> ids(1);
  for (int t = 0; t < 480; ++t)
    for (int32_t l : {1, 2, 4, 5}) {
      ids[0] = t % 48;
      prof.add(l, ids.data(), 1, 1);
    }
  in.budget_bytes = (600ull << 20) + 2 * 2039808 + 150 * in.layer_expert_bytes[1];
  const Plan p = make_plan(in, &prof, "prof");
  ASSERT_EQ(p.classes.size(), 2u);
  EXPECT_EQ(p.classes[0].n_slots, 0);
  EXPECT_EQ(p.classes[1].n_slots, 150);
  EXPECT_EQ(p.classes[1].first_slot, 0);
  EXPECT_EQ(p.slot_offset(0), 0u);
  EXPECT_EQ(p.slots_bytes(), 150 * in.layer_expert_bytes[1]);
  ExpertCache c(p.n_slots, 8, 48, EvictionPolicy::lrfu, p.slot_partition());
  EXPECT_EQ(c.insert(0, 3, 1), -1);  // no slot for a large expert: computed elsewhere
  EXPECT_GE(c.insert(1, 3, 1), 0);
  // No budget: every expert of every class.
  in.budget_bytes = 0;
  const Plan all = make_plan(in);
  EXPECT_EQ(all.n_slots, 8 * 48);
  EXPECT_EQ(all.classes[0].n_slots, 4 * 48);
  EXPECT_EQ(all.hot_source, "all");
}

TEST(HostStore, UringAndMmapReadTheFileBytes) {
  // A file with unaligned regions (odd offsets and sizes) and one ending at end of file.
  const std::string path = test::scratch_dir() + "/store.bin";
  std::vector<uint8_t> bytes(3 * 1024 * 1024 + 777);
  std::mt19937 rng(9);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const std::vector<StoreRegion> regions = {
      {13, 100000, bytes.data() + 13},
      {4096, 1 << 20, bytes.data() + 4096},
      {1500000, 123457, bytes.data() + 1500000},
      {bytes.size() - 5000, 5000, bytes.data() + bytes.size() - 5000}};
  auto dev = make_sim_device(DeviceOptions{});
  for (HostLoad mode : {HostLoad::uring, HostLoad::mmap, HostLoad::registered, HostLoad::alias}) {
    double last = 0;
    HostStore s(dev.get(), path, regions, mode, [&](double f) { last = f; });
    EXPECT_DOUBLE_EQ(last, 1.0) << host_load_name(mode);
    ASSERT_EQ(s.n_regions(), regions.size());
    for (size_t r = 0; r < regions.size(); ++r)
      EXPECT_EQ(std::memcmp(s.data(r), bytes.data() + regions[r].file_offset, regions[r].bytes), 0)
          << host_load_name(mode) << " region " << r;
    if (mode == HostLoad::uring || mode == HostLoad::mmap) {
      EXPECT_GT(s.stats().load_gbps, 0.0);
      EXPECT_NE(s.data(0), regions[0].mapped);  // a copy, not the mapping
    } else {
      EXPECT_EQ(s.data(0), regions[0].mapped);  // the mapping itself (registered: page-locked in place)
    }
    EXPECT_EQ(s.stats().pinned, mode != HostLoad::alias) << host_load_name(mode);
  }
  // A region past the end of the file is an I/O error, not garbage.
  const std::vector<StoreRegion> past = {{bytes.size() - 10, 4096, nullptr}};
  EXPECT_THROW(HostStore(dev.get(), path, past, HostLoad::uring), Error);
  EXPECT_THROW(HostStore(dev.get(), path + ".missing", regions, HostLoad::uring), Error);
}

TEST(HostStore, RefusesWhenHostMemoryIsShort) {
  EXPECT_GT(host_mem_available(), 0u);
  try {
    check_host_memory(host_mem_available() * 4, "the experts");
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
  EXPECT_NO_THROW(check_host_memory(1 << 20, "a little"));
}

}  // namespace
}  // namespace ferry
