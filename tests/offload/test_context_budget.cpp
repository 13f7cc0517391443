// A context whose KV cache and state do not fit in the device budget is refused up front, through
// the built `ferry` binary on the sim device: `--vram` between what -c 16384 needs with an f16
// cache and what it needs with q8_0 (or with -c 64) refuses the f16 one with the figures (-c, the
// KV types and what is missing) and runs the other two. The budget is derived from the plans the
// binary prints without one, so the test follows the model and fails if the KV bytes stop counting.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tests/offload/run_command.hpp"
#include "offload_test_util.hpp"

namespace ferry {
namespace {

// Runs a command; returns its exit status and (stdout + stderr) in `out`.
int run(const std::string& cmd, std::string& out) { return test::run_command(cmd, out); }

class ContextBudget : public ::testing::TestWithParam<synth::Arch> {
 protected:
  void SetUp() override {
    binary_ = std::string(FERRY_BINARY_DIR) + "/ferry";
    if (!std::filesystem::exists(binary_)) GTEST_SKIP() << binary_ << " not built";
    synth::Options o;
    o.arch = GetParam();
    o.preset = synth::Preset::tiny;
    o.quant = synth::QuantMix::q4_k_m;
    o.seed = 6;
    name_ = std::string("ctx-budget-") +
            (GetParam() == synth::Arch::qwen3moe ? "qwen3moe" : "qwen35moe");
    model_ = test::write_model(o, name_);
  }
  static void TearDownTestSuite() { test::remove_scratch(); }

  // `ferry logits` on three tokens with the sim device; returns the exit status.
  int logits(const std::string& flags) {
    return run(binary_ + " logits -t 2 -m " + model_ + " --tokens 1,2,3 --device sim -o " +
                   test::scratch_dir() + "/" + name_ + ".npy " + flags,
               out_);
  }
  // The plan of `flags` without a budget.
  nlohmann::json plan(const std::string& flags) {
    const std::string path = test::scratch_dir() + "/" + name_ + "-plan.json";
    EXPECT_EQ(logits(flags + " --plan-json " + path), 0) << flags << "\n" << out_;
    std::ifstream f(path);
    return nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(f), {}));
  }
  static uint64_t fixed_bytes(const nlohmann::json& p) {
    return p["total_bytes"].get<uint64_t>() - p["slots_bytes"].get<uint64_t>();
  }

  std::string binary_, name_, model_, out_;
};

TEST_P(ContextBudget, RefusedUpFrontWithTheFigures) {
  const std::string f16 = "-c 16384", q8 = "-c 16384 -ctk q8_0 -ctv q8_0", small = "-c 64";
  const nlohmann::json p_f16 = plan(f16), p_q8 = plan(q8), p_small = plan(small);
  ASSERT_GT(p_f16["kv_bytes"].get<uint64_t>(), 0u);
  // q8_0 stores 34 bytes per 32 values, f16 64: the KV cache shrinks to 17/32.
  EXPECT_EQ(p_q8["kv_bytes"].get<uint64_t>() * 32, p_f16["kv_bytes"].get<uint64_t>() * 17);
  uint64_t largest_expert = 0;
  for (const auto& c : p_f16["classes"])
    largest_expert = std::max(largest_expert, c["expert_bytes"].get<uint64_t>());
  const uint64_t top_k_slots = 8 * largest_expert;  // more than the plan's minimum (top_k slots)
  const uint64_t vram = std::max(fixed_bytes(p_q8), fixed_bytes(p_small)) + top_k_slots;
  ASSERT_GT(fixed_bytes(p_f16), vram)
      << "the model's f16 KV cache at -c 16384 is too small for this test";

  const std::string budget = " --vram " + std::to_string(vram);
  EXPECT_EQ(logits(f16 + budget), 1) << out_;
  EXPECT_NE(out_.find("too small"), std::string::npos) << out_;
  EXPECT_NE(out_.find("missing"), std::string::npos) << out_;
  EXPECT_NE(out_.find("-c 16384"), std::string::npos) << out_;
  EXPECT_NE(out_.find("F16/F16"), std::string::npos) << out_;
  EXPECT_NE(out_.find("-ctk/-ctv"), std::string::npos) << out_;
  EXPECT_EQ(out_.find("ferry logits: 3 tokens"), std::string::npos) << "refused, yet it ran:\n"
                                                                    << out_;

  EXPECT_EQ(logits(q8 + budget), 0) << out_;
  EXPECT_EQ(logits(small + budget), 0) << out_;
}

INSTANTIATE_TEST_SUITE_P(Arch, ContextBudget,
                         ::testing::Values(synth::Arch::qwen3moe, synth::Arch::qwen35moe),
                         [](const auto& info) {
                           return info.param == synth::Arch::qwen3moe ? "qwen3moe" : "qwen35moe";
                         });

}  // namespace
}  // namespace ferry
