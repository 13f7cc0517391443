// The offload cost model: its estimates from given rates, the choice per cold expert (CPU, copy
// now, wait for a prefetch, read in place over the link), and hardware profiles.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "offload/cost_model.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// A 35B-A3B-like Q4_K expert (~1.7 MB) on a PCIe 4.0 card: copy 2 MB ≈ 80 µs, CPU ≈ 85 µs.
HardwareRates pcie_card() {
  HardwareRates r;
  r.h2d_gbps = 25.0;
  r.copy_latency_us = 10.0;
  r.device_gbps = 500.0;
  r.cpu_gbps = 20.0;
  r.cpu_handoff_us = 10.0;
  return r;
}
constexpr uint64_t kExpert = 1'700'000;

TEST(CostModel, EstimatesFollowTheRates) {
  HardwareRates r = pcie_card();
  r.mapped_gbps = 20.0;
  const CostModel m(r);
  EXPECT_DOUBLE_EQ(m.copy_us(kExpert), 10.0 + 1.7e6 / 25e3);
  EXPECT_DOUBLE_EQ(m.device_us(kExpert, 1), 1.7e6 / 500e3);
  EXPECT_DOUBLE_EQ(m.cpu_us(kExpert, 1), 10.0 + 1.7e6 / 20e3);
  EXPECT_DOUBLE_EQ(m.mapped_us(kExpert, 1), 1.7e6 / 20e3);
  // Weights are re-read once per 4-token tile.
  EXPECT_DOUBLE_EQ(m.device_us(kExpert, 5), 2 * m.device_us(kExpert, 4));
  EXPECT_DOUBLE_EQ(m.mapped_us(kExpert, 9), 3 * m.mapped_us(kExpert, 1));
  EXPECT_DOUBLE_EQ(m.cpu_us(kExpert, 8) - 10.0, 2 * (m.cpu_us(kExpert, 1) - 10.0));
  // No mapped rate: reading in place costs infinitely much.
  EXPECT_TRUE(std::isinf(CostModel(pcie_card()).mapped_us(kExpert, 1)));
}

TEST(CostModel, ChoosesTheCheapestPath) {
  const CostModel m(pcie_card());
  // Decode miss: copy (78 + 3.4 µs) beats the CPU (95 µs); a slow link makes the CPU win.
  EXPECT_EQ(m.choose(kExpert, 1, -1, 0), ColdChoice::copy_now);
  HardwareRates slow = pcie_card();
  slow.h2d_gbps = 10.0;
  EXPECT_EQ(CostModel(slow).choose(kExpert, 1, -1, 0), ColdChoice::cpu);
  // Copies already queued on the link count against copying now.
  EXPECT_EQ(m.choose(kExpert, 1, -1, 50.0), ColdChoice::cpu);
  // A prefetch about to land is waited for; one that has barely started is not.
  EXPECT_EQ(m.choose(kExpert, 1, 5.0, 0), ColdChoice::wait_prefetch);
  EXPECT_EQ(m.choose(kExpert, 1, 95.0, 0), ColdChoice::cpu);
  // Prefill: 64 tokens re-read the weights 16 times on the CPU, once per tile on the device.
  EXPECT_EQ(m.choose(kExpert, 64, -1, 0), ColdChoice::copy_now);
}

TEST(CostModel, ReadingInPlaceIsChosenOnlyWhenMeasuredAndCheaper) {
  HardwareRates r = pcie_card();
  // Without a measured mapped rate it is never chosen, even when allowed.
  EXPECT_NE(CostModel(r).choose(kExpert, 1, -1, 0, true), ColdChoice::mapped);
  // Mapped reads at 24 GB/s (71 µs) beat copy-now (81 µs) and the CPU (95 µs) …
  r.mapped_gbps = 24.0;
  const CostModel m(r);
  EXPECT_EQ(m.choose(kExpert, 1, -1, 0, true), ColdChoice::mapped);
  // … but only where the caller allows it (prefill, or a store the device cannot map),
  EXPECT_EQ(m.choose(kExpert, 1, -1, 0, false), ColdChoice::copy_now);
  // not against a prefetch that is nearly done,
  EXPECT_EQ(m.choose(kExpert, 1, 5.0, 0, true), ColdChoice::wait_prefetch);
  // not when the link is busy with queued copies (they delay the reads too),
  EXPECT_EQ(m.choose(kExpert, 1, -1, 30.0, true), ColdChoice::cpu);
  // and not for a batch, which reads the link once per tile.
  EXPECT_EQ(m.choose(kExpert, 16, -1, 0, true), ColdChoice::copy_now);
  // A slow mapped path (a card that reads host memory badly) loses to the others.
  r.mapped_gbps = 5.0;
  EXPECT_EQ(CostModel(r).choose(kExpert, 1, -1, 0, true), ColdChoice::copy_now);
  EXPECT_STREQ(cold_choice_name(ColdChoice::mapped), "mapped");
}

class CostModelProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ferry-cost-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  std::filesystem::path dir_;
};

TEST_F(CostModelProfile, ReadsTheShippedProfiles) {
  const HardwareRates r = rates_from_profile(std::string(FERRY_SOURCE_DIR) + "/profiles/hardware/h200-pcie5.json");
  EXPECT_DOUBLE_EQ(r.h2d_gbps, 54.0);      // the best figure of the size map
  EXPECT_DOUBLE_EQ(r.device_gbps, 4400.0);
  EXPECT_DOUBLE_EQ(r.cpu_gbps, 117.0);
  EXPECT_DOUBLE_EQ(r.copy_latency_us, 2 * 4.8);
  EXPECT_DOUBLE_EQ(r.cpu_handoff_us, 10.4);
  EXPECT_DOUBLE_EQ(r.mapped_gbps, 0.0);  // not measured there yet: never chosen
}

TEST_F(CostModelProfile, MappedRateAndBadFiles) {
  const HardwareRates r = rates_from_profile(
      write("m.json", R"({"h2d_pinned_gbps": 25, "vram_read_gbps": 500, "host_dram_read_gbps": 40, "mapped_read_gbps": {"1MiB": 18, "4MiB+": 23}})"));
  EXPECT_DOUBLE_EQ(r.mapped_gbps, 23.0);
  const auto message = [](const std::string& path) {
    try {
      (void)rates_from_profile(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(write("neg.json", R"({"mapped_read_gbps": -1})")).find("positive"), std::string::npos);
  EXPECT_NE(message(write("arr.json", "[1, 2]")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(message(write("trunc.json", R"({"h2d_pinned_gbps": )")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(message((dir_ / "missing.json").string()).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace ferry
