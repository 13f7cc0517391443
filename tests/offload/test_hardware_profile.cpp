// profiles/hardware: every shipped profile loads, every figure is labelled spec or measured with a
// source, a bad profile is an error naming the file and the field, and the simulator's derived
// rates follow docs/simulator.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "offload/hardware_profile.hpp"
#include "offload/simulate_rates.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

const std::string kDir = std::string(FERRY_SOURCE_DIR) + "/profiles/hardware";

// The message of the Error a parse raises (empty: none).
std::string parse_error(const std::string& text) {
  try {
    parse_hardware_profile(text, "bad.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format);
    return e.what();
  }
  return "";
}

std::string gpu_json(const std::string& figures) {
  return R"({"format": "ferry-hardware-profile", "version": 1, "kind": "gpu", "id": "x", "name": "X",
             "figures": {)" + figures + "}}";
}

const char* kFullGpu =
    R"("vram_bytes": {"value": 1, "label": "spec", "source": "s"},
       "mem_bandwidth_gbps": {"value": 1, "label": "spec", "source": "s"},
       "pcie_gen": {"value": 4, "label": "spec", "source": "s"},
       "pcie_lanes": {"value": 16, "label": "spec", "source": "s"},
       "sm_count": {"value": 1, "label": "spec", "source": "s"},
       "boost_clock_mhz": {"value": 1, "label": "spec", "source": "s"})";

TEST(HardwareProfile, ShippedProfilesLoadWithLabelledFigures) {
  const auto gpus = list_hardware_profiles(kDir, ProfileKind::gpu);
  const auto hosts = list_hardware_profiles(kDir, ProfileKind::host);
  // The issue's cards (3060 … 5090, H100, H200) and desktop hosts.
  EXPECT_GE(gpus.size(), 19u);
  EXPECT_GE(hosts.size(), 5u);
  for (const char* id : {"rtx3060-12g", "rtx3080-10g", "rtx3080-12g", "rtx4060ti-8g", "rtx4060ti-16g",
                         "rtx4070-12g", "rtx4070s-12g", "rtx4070tis-16g", "rtx4080-16g",
                         "rtx4080s-16g", "rtx5060ti-16g", "rtx5070-12g", "rtx5070ti-16g",
                         "rtx5080-16g", "rtx3090-24g", "rtx4090-24g", "rtx5090-32g", "h100-sxm-80g",
                         "h200"})
    EXPECT_EQ(find_hardware_profile(kDir, ProfileKind::gpu, id).id, id);
  for (const auto& set : {gpus, hosts})
    for (const HardwareProfile& p : set)
      for (const auto& [key, f] : p.figures) {
        EXPECT_TRUE(f.label == FigureLabel::spec || f.label == FigureLabel::measured) << p.path << " " << key;
        EXPECT_FALSE(f.source.empty()) << p.path << " " << key;
      }
  // A GPU's plausible hosts exist.
  for (const HardwareProfile& g : gpus)
    for (const std::string& h : g.hosts) EXPECT_NO_THROW(find_hardware_profile(kDir, ProfileKind::host, h)) << g.id;
  // Only the two GPU machines' figures are measured (the H200's, and since 2026-12-05 the H100's).
  for (const HardwareProfile& g : gpus)
    for (const auto& [key, f] : g.figures) {
      if (g.id != "h200" && g.id != "h100-sxm-80g") {
        EXPECT_EQ(f.label, FigureLabel::spec) << g.id << " " << key;
      }
    }
  // The H100's measured figures name the run they come from; its host is the machine's own.
  const HardwareProfile h100 = find_hardware_profile(kDir, ProfileKind::gpu, "h100-sxm-80g");
  for (const char* key : {"copy_bandwidth_gbps", "h2d_pinned_gbps", "vram_bytes"}) {
    EXPECT_EQ(h100.figure(key).label, FigureLabel::measured) << key;
    EXPECT_NE(h100.figure(key).source.find("2026-12-05-gpu-check-h100"), std::string::npos) << key;
  }
  EXPECT_DOUBLE_EQ(h100.number("copy_bandwidth_gbps"), 3024.0);
  EXPECT_EQ(h100.figure("mem_bandwidth_gbps").label, FigureLabel::spec);
  ASSERT_EQ(h100.hosts.size(), 1u);
  const HardwareProfile h100_host = find_hardware_profile(kDir, ProfileKind::host, h100.hosts[0]);
  EXPECT_EQ(h100_host.number("cores"), 16.0);
  EXPECT_EQ(h100_host.text("isa"), "avx512");
  EXPECT_EQ(h100_host.figure("store_load_gbps").label, FigureLabel::measured);
  // Its DRAM figures were measured on the H200 machine's host, and say so.
  EXPECT_NE(h100_host.figure("dram_bandwidth_gbps").source.find("not on this one"), std::string::npos);
  const HardwareProfile sim = load_hardware_profile(kDir + "/simulator.json");
  EXPECT_EQ(sim.kind, ProfileKind::simulator);
}

TEST(HardwareProfile, ErrorsNameTheFileAndTheField) {
  EXPECT_EQ(parse_error(gpu_json(kFullGpu)), "");
  EXPECT_NE(parse_error("{").find("bad.json: not JSON"), std::string::npos);
  EXPECT_NE(parse_error(R"({"format": "x", "version": 1})").find("\"format\""), std::string::npos);
  // A required figure missing.
  std::string missing = kFullGpu;
  missing = missing.substr(0, missing.find(",\n       \"boost_clock_mhz\""));
  const std::string m = parse_error(gpu_json(missing));
  EXPECT_NE(m.find("bad.json"), std::string::npos) << m;
  EXPECT_NE(m.find("boost_clock_mhz"), std::string::npos) << m;
  // A label other than spec/measured, an empty source, a negative value, a string where a number
  // belongs: each names the figure.
  for (const auto& [fig, what] : std::vector<std::pair<std::string, std::string>>{
           {R"("extra": {"value": 1, "label": "guess", "source": "s"})", "label \"guess\""},
           {R"("extra": {"value": 1, "label": "spec", "source": ""})", "has no \"source\""},
           {R"("extra": {"value": -3, "label": "spec", "source": "s"})", "negative"},
           {R"("extra": {"label": "spec", "source": "s"})", "has no \"value\""},
           {R"("extra": 5)", "is not an object"}}) {
    const std::string e = parse_error(gpu_json(std::string(kFullGpu) + ", " + fig));
    EXPECT_NE(e.find("\"extra\""), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  }
  const std::string swapped = std::string(kFullGpu);
  const std::string t = parse_error(gpu_json(
      std::string(kFullGpu).replace(swapped.find("\"value\": 4"), 10, "\"value\": \"4\"")));
  EXPECT_NE(t.find("pcie_gen"), std::string::npos) << t;
  // "assumed" is for the simulator's parameters only.
  EXPECT_NE(parse_error(gpu_json(std::string(kFullGpu) +
                                 R"(, "x": {"value": 1, "label": "assumed", "source": "s"})"))
                .find("label \"assumed\""),
            std::string::npos);
  // Unknown ids list the known ones.
  try {
    find_hardware_profile(kDir, ProfileKind::gpu, "rtx9999");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_arg);
    EXPECT_NE(std::string(e.what()).find("rtx3060-12g"), std::string::npos) << e.what();
  }
}

TEST(HardwareProfile, DerivedRates) {
  EXPECT_NEAR(pcie_spec_gbps(4, 16), 31.5, 0.01);
  EXPECT_NEAR(pcie_spec_gbps(5, 8), 31.5, 0.01);
  EXPECT_THROW(pcie_spec_gbps(6, 16), Error);
  const HardwareProfile params = load_hardware_profile(kDir + "/simulator.json");
  const SimRates h200 = sim_rates(find_hardware_profile(kDir, ProfileKind::gpu, "h200"),
                                  find_hardware_profile(kDir, ProfileKind::host, "h200-host-16c"), params);
  // The reference card gets its own measured figures back.
  EXPECT_DOUBLE_EQ(h200.link_gbps, 54.0);
  EXPECT_DOUBLE_EQ(h200.mem_gbps, 4214.0);
  EXPECT_DOUBLE_EQ(h200.ferry_kernel_gbps.at(GgmlType::Q4_K), 1333.0);
  const SimRates r3060 = sim_rates(find_hardware_profile(kDir, ProfileKind::gpu, "rtx3060-12g"),
                                   find_hardware_profile(kDir, ProfileKind::host, "ddr4-3200-2ch-6c"), params);
  // PCIe 4.0 x16 at the H200's share of its own link spec; memory at the H200's copy share.
  EXPECT_NEAR(r3060.link_gbps, 31.5 * 54.0 / 63.0, 0.05);
  EXPECT_NEAR(r3060.mem_gbps, 360.0 * 4214.0 / 4800.0, 0.01);
  // Q4_K is compute-bound there: the H200's rate scaled by SMs x clock, under the memory roof.
  EXPECT_NEAR(r3060.ferry_kernel_gbps.at(GgmlType::Q4_K), 1333.0 * 28 * 1777 / (132.0 * 1980), 0.01);
  EXPECT_LE(r3060.llama_kernel_gbps.at(GgmlType::Q8_0), r3060.mem_gbps);
  // Prefill: Ferry's from the H200, llama.cpp's from its own reference card, each by SMs x clock.
  EXPECT_NEAR(r3060.prefill_gflops, 12180.0 * 28 * 1777 / (132.0 * 1980), 0.01);
  EXPECT_NEAR(r3060.llama_prefill_gflops, 45217.0 * 28 * 1777 / (188.0 * 2617), 0.01);
  // A spec host bandwidth is scaled to a stream, then to the CPU kernels' share.
  EXPECT_NEAR(r3060.cpu_gbps, 51.2 * 0.80 * 0.73, 0.01);
  // llama.cpp's uploads from its mapped (pageable) weights: one staging thread under the link, at
  // the host's own measured one-thread rate where its profile has one (model revision 9).
  EXPECT_DOUBLE_EQ(r3060.llama_upload_gbps, 17.7);
  EXPECT_LT(r3060.llama_upload_gbps, r3060.link_gbps);
  EXPECT_DOUBLE_EQ(h200.llama_upload_gbps, 12.8);
  // The H100: its measured copy bandwidth and link as they are. The attention decode's fixed time
  // is latency, taken as measured on every card (as the kernel floor).
  const SimRates h100 = sim_rates(find_hardware_profile(kDir, ProfileKind::gpu, "h100-sxm-80g"),
                                  find_hardware_profile(kDir, ProfileKind::host, "h100-host-16c"), params);
  EXPECT_DOUBLE_EQ(h100.mem_gbps, 3024.0);
  EXPECT_DOUBLE_EQ(h100.link_gbps, 54.7);
  EXPECT_DOUBLE_EQ(h100.attention_fixed_us, 17.2);
  EXPECT_DOUBLE_EQ(r3060.attention_fixed_us, 17.2);
  EXPECT_NEAR(h100.attention_mem_fraction * h100.mem_gbps, 705.0, 0.5);
  // llama.cpp's decode kernels per layer, counted per architecture; an unknown one is an error.
  EXPECT_DOUBLE_EQ(h100.llama_nodes("qwen35moe"), 55.0);
  EXPECT_DOUBLE_EQ(h100.llama_nodes("qwen3moe"), 35.5);
  EXPECT_THROW(h100.llama_nodes("llama"), Error);
  // Decisions use the engine's start-up calibration of those durations: its split of the timed
  // copy keeps a third of latency min(3 x 10 us, half the copy), so the estimate is two thirds of
  // that under the timed copy (57 us here: 9.5 us under); the CPU keeps the base hand-off (10 us,
  // not timed) and its one-expert time.
  const uint64_t expert = 2'000'000;
  const HardwareRates cal = h200.calibrated_rates(GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, expert);
  const double timed_copy_us = h200.copy_latency_us + expert / (54.0 * 1e3) + h200.sync_us;
  EXPECT_NEAR(CostModel(cal).copy_us(expert),
              timed_copy_us - 2.0 / 3 * std::min(30.0, timed_copy_us / 2), 1e-6);
  EXPECT_LT(CostModel(cal).copy_us(expert), timed_copy_us - 9.0);
  EXPECT_NEAR(CostModel(cal).cpu_us(expert, 1), 10.0 + expert / (h200.cpu_gbps * 1e3), 1e-6);
  EXPECT_DOUBLE_EQ(cal.device_gbps,
                   h200.cost_rates(GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K).device_gbps);
  // A copy shorter than six base latencies keeps half of it as latency.
  const HardwareRates quick = rates_from_calibration(HardwareRates{}, expert, 20.0, 40.0);
  EXPECT_NEAR(CostModel(quick).copy_us(expert), 40.0 - 20.0 + 20.0 / 3, 1e-9);
  // From six base latencies on, exactly 2 x 10 us under the timed copy.
  const HardwareRates slow = rates_from_calibration(HardwareRates{}, expert, 20.0, 90.0);
  EXPECT_NEAR(CostModel(slow).copy_us(expert), 70.0, 1e-9);
  EXPECT_NEAR(quick.cpu_gbps, 100.0, 1e-9);
  EXPECT_THROW(sim_rates(find_hardware_profile(kDir, ProfileKind::host, "ddr4-3200-2ch-6c"),
                         find_hardware_profile(kDir, ProfileKind::host, "ddr4-3200-2ch-6c"), params),
               Error);
}

}  // namespace
}  // namespace ferry
