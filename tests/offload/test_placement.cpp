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
  in.expert_bytes = 1769472 + 100;  // not a multiple of 256: slots round up
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
  EXPECT_EQ(p.slot_bytes % 256, 0u);
  EXPECT_GE(p.slot_bytes, p.in.expert_bytes);
  EXPECT_LE(p.total_bytes(), p.in.budget_bytes);
  EXPECT_GT(p.total_bytes() + p.slot_bytes, p.in.budget_bytes);  // one more slot would not fit
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
  Plan probe = make_plan(qwen3_like());
  in.budget_bytes = probe.fixed_bytes() + 8 * probe.slot_bytes;
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
  const Plan probe = make_plan([&] {
    auto x = in;
    x.budget_bytes = 0;
    return x;
  }());
  in.budget_bytes = probe.fixed_bytes() + 12 * probe.slot_bytes;  // 12 of 48 experts
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
