// `ferry plan`'s sizes are the real ones: a synthetic model described without its data has the
// tensor table `ferry synth` writes (so the plan's weights equal `ferry synth --plan` byte for
// byte), its KV bytes are what the session's KvCache allocates for the same -c/-ctk/-ctv, and the
// JSON carries the keys issue 28 lists.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "offload_test_util.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/plan/plan_model.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/kv_cache.hpp"
#include "tests/offload/run_command.hpp"

namespace ferry {
namespace {

std::string ferry_binary() { return std::string(FERRY_BINARY_DIR) + "/ferry"; }

gguf::File describe(const synth::ModelPlan& plan) {
  std::vector<gguf::File::TensorDecl> decls;
  for (const synth::TensorPlan& t : plan.tensors) decls.push_back({t.name, t.type, t.ne});
  return gguf::File::describe("described", plan.metadata, decls);
}

nlohmann::json plan_json(const std::string& flags) {
  std::string out;
  const int rc = test::run_command(ferry_binary() + " plan --gpu h200 --host h200-host-16c -n 4 -p 0 --json " +
                                       flags + " 2>/dev/null",
                                   out);
  EXPECT_EQ(rc, 0) << flags << "\n" << out;
  return rc == 0 ? nlohmann::json::parse(out) : nlohmann::json();
}

class PlanSizes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(ferry_binary())) GTEST_SKIP() << ferry_binary() << " not built";
  }
  static void TearDownTestSuite() { test::remove_scratch(); }
};

TEST(PlanDescribe, DescribedTableIsTheWrittenFiles) {
  synth::Options o;
  o.arch = synth::Arch::qwen35moe;
  o.quant = synth::QuantMix::q4_k_m;
  const synth::ModelPlan plan = synth::make_plan(o);
  const gguf::File real = gguf::File::open(test::write_model(o, "plan-describe"));
  const gguf::File d = describe(plan);
  ASSERT_EQ(real.tensors().size(), d.tensors().size());
  for (size_t i = 0; i < d.tensors().size(); ++i) {
    const gguf::TensorInfo &a = real.tensors()[i], &b = d.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type) << a.name;
    EXPECT_EQ(a.ne, b.ne) << a.name;
    EXPECT_EQ(a.nb, b.nb) << a.name;
    EXPECT_EQ(a.offset, b.offset) << a.name;
    EXPECT_EQ(a.n_bytes, b.n_bytes) << a.name;
  }
  EXPECT_EQ(real.file_size() - real.data_offset(), d.file_size());
  EXPECT_EQ(real.metadata().size(), d.metadata().size());
  EXPECT_EQ(d.base(), nullptr);
  // A shape the reader would reject is rejected here too.
  EXPECT_THROW(gguf::File::describe("bad", {}, {{"t", GgmlType::Q4_K, {100, 2}}}), Error);
}

// Issue 28: Qwen3.5/3.6-35B-A3B and Qwen3-30B-A3B at Q4_K_M, Q8_0 and Q2_K.
TEST_F(PlanSizes, WeightsEqualSynthPlanBytes) {
  for (const auto& [arch, preset] : std::vector<std::pair<const char*, const char*>>{
           {"qwen35moe", "35b-a3b"}, {"qwen3moe", "30b-a3b"}})
    for (const char* quant : {"q4_k_m", "q8_0", "q2_k"}) {
      synth::Options o;
      o.arch = *synth::arch_from_name(arch);
      o.preset = *synth::preset_from_name(o.arch, preset);
      o.quant = *synth::quant_mix_from_name(quant);
      const synth::ModelPlan plan = synth::make_plan(o);
      uint64_t experts = 0;
      for (const synth::TensorPlan& t : plan.tensors)
        if (t.name.find("_exps.") != std::string::npos) experts += t.n_bytes;
      const auto j = plan_json(fmt::format("--arch {} --preset {} --quant {}", arch, preset, quant));
      ASSERT_TRUE(j.contains("model")) << arch << " " << quant;
      EXPECT_EQ(j["model"]["weights_bytes"].get<uint64_t>(), plan.tensor_bytes()) << arch << " " << quant;
      EXPECT_EQ(j["model"]["expert_bytes"].get<uint64_t>(), experts) << arch << " " << quant;
    }
}

TEST_F(PlanSizes, KvBytesEqualTheSessionsCache) {
  for (const synth::Arch arch : {synth::Arch::qwen3moe, synth::Arch::qwen35moe}) {
    synth::Options o;
    o.arch = arch;
    o.quant = synth::QuantMix::q8_0;
    const std::string path =
        test::write_model(o, std::string("plan-kv-") + std::string(synth::arch_name(arch)));
    const gguf::File f = gguf::File::open(path);
    const ModelConfig c = read_config(f);
    CpuOps ops;
    for (const auto& [ctx, tk, tv] : std::vector<std::tuple<int64_t, const char*, const char*>>{
             {256, "f16", "f16"}, {300, "q8_0", "q4_0"}, {1024, "f32", "iq4_nl"}}) {
      const auto j = plan_json(fmt::format("-m {} -c {} -ctk {} -ctv {}", path, ctx, tk, tv));
      ASSERT_TRUE(j.contains("context"));
      const KvCache kv(ops, c, ctx, *type_from_name(tk), *type_from_name(tv));
      EXPECT_EQ(j["context"]["kv_bytes"].get<uint64_t>(), kv.bytes()) << path << " " << ctx << tk << tv;
      EXPECT_EQ(j["context"]["n_ctx"].get<int64_t>(), ctx);
      // The weights of a file are its tensors' bytes.
      uint64_t w = 0;
      for (const auto& t : f.tensors()) w += t.n_bytes;
      EXPECT_EQ(j["model"]["weights_bytes"].get<uint64_t>(), w);
    }
    // -np: the sequences share the context's KV cache; each keeps its own recurrent state.
    const auto one = plan_json(fmt::format("-m {} -c 256", path));
    const auto two = plan_json(fmt::format("-m {} -c 256 -np 2", path));
    EXPECT_EQ(two["context"]["kv_bytes"], one["context"]["kv_bytes"]);
    EXPECT_EQ(two["context"]["state_bytes"].get<uint64_t>(), 2 * one["context"]["state_bytes"].get<uint64_t>());
    if (arch == synth::Arch::qwen35moe) {
      EXPECT_GT(one["context"]["state_bytes"].get<uint64_t>(), 0u);
    }
  }
}

TEST_F(PlanSizes, JsonHasTheIssuesKeys) {
  const auto j = plan_json("--arch qwen35moe --preset 35b-a3b --quant q4_k_m -c 8192");
  for (const char* k : {"weights_bytes", "expert_bytes"}) EXPECT_TRUE(j["model"].contains(k)) << k;
  for (const char* k : {"kv_bytes", "state_bytes"}) EXPECT_TRUE(j["context"].contains(k)) << k;
  EXPECT_TRUE(j["host"].contains("ram_bytes"));
  ASSERT_EQ(j["cards"].size(), 1u);
  const auto& c = j["cards"][0];
  for (const char* k : {"gpu", "host", "vram_bytes", "fits", "experts_on_gpu_fraction", "max_context"})
    EXPECT_TRUE(c.contains(k)) << k;
  for (const char* s : {"ferry", "llamacpp_fit", "llamacpp_ncmoe"})
    for (const char* k : {"tg_tps", "pp_tps"}) EXPECT_TRUE(c["estimates"][s].contains(k)) << s << k;
  EXPECT_TRUE(c["estimates"]["ferry"].contains("hit_rate"));
  EXPECT_TRUE(c["estimates"]["llamacpp_ncmoe"].contains("n_cpu_moe"));
  // A card whose host is a band reports its ends.
  std::string out;
  ASSERT_EQ(test::run_command(ferry_binary() + " plan --gpu rtx5060ti-16g -n 4 -p 0 --json 2>/dev/null", out), 0);
  const auto band = nlohmann::json::parse(out)["cards"][0];
  EXPECT_TRUE(band["host"].is_array());
  EXPECT_TRUE(band["estimates"]["ferry"].contains("tg_tps_low"));
  EXPECT_TRUE(band["estimates"]["ferry"].contains("tg_tps_high"));
  // The text marks estimates as such.
  ASSERT_EQ(test::run_command(ferry_binary() + " plan --gpu rtx3060-12g -n 4 -p 0", out), 0);
  EXPECT_NE(out.find("estimate"), std::string::npos);
  EXPECT_NE(out.find("which GPUs can run it"), std::string::npos);
}

// The H100 side by side (bench/results/2026-12-05-gpu-check-h100.md) measured Ferry slower than
// llama.cpp at decode everywhere and faster at prefill on the 16G and 12G cards (the card partly
// held by a ballast: --free, the free memory Ferry's fit saw); the plan's ratio column agrees.
TEST_F(PlanSizes, FerryVsLlamaCppAgreesInSignWithTheH100SideBySide) {
  const auto card = [](const std::string& flags) {
    std::string out;
    const std::string cmd = ferry_binary() + " plan --arch qwen35moe --preset 35b-a3b --quant q4_k_m "
                            "--gpu h100-sxm-80g --routing uniform -n 8 -p 512 --json " + flags + " 2>&1";
    EXPECT_EQ(test::run_command(cmd, out), 0) << cmd << "\n" << out;
    return nlohmann::json::parse(out)["cards"][0]["ferry_vs_llamacpp"];
  };
  const auto resident = card("");
  EXPECT_LT(resident["tg_ratio"].get<double>(), 1.0);
  EXPECT_LT(resident["pp_ratio"].get<double>(), 1.0);
  for (const char* free : {"--free 15862M", "--free 11766M"}) {
    const auto c = card(free);
    EXPECT_LT(c["tg_ratio"].get<double>(), 1.0) << free;
    EXPECT_GT(c["pp_ratio"].get<double>(), 1.0) << free;
    EXPECT_TRUE(c["estimate"].get<bool>());
  }
  std::string out;
  EXPECT_NE(test::run_command(ferry_binary() + " plan --arch qwen35moe --preset 35b-a3b --quant q4_k_m --free 12G 2>&1", out), 0);
  EXPECT_NE(out.find("--free needs --gpu"), std::string::npos) << out;
  EXPECT_NE(test::run_command(ferry_binary() + " plan --arch qwen35moe --preset 35b-a3b --quant q4_k_m "
                              "--gpu rtx3060-12g --free 16G 2>&1", out), 0);
  EXPECT_NE(out.find("more than rtx3060-12g"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry
