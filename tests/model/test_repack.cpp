// The CPU's interleaved layout through the engine (CpuOpsOptions::repack, `--no-repack`): on tiny
// synthetic qwen3moe and qwen35moe models of the Q4_0, IQ4_NL and MXFP4_MOE mixes, a model loaded
// with repacking gives bit for bit the logits of the same file loaded without it, prefill and
// decode, and it really repacked (attention, experts); past the RAM budget it keeps the file's
// layout and still computes the same.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/engine/engine.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

struct Case {
  synth::Arch arch;
  synth::QuantMix quant;
};

std::vector<float> logits(LoadedModel& m, const std::vector<int32_t>& prompt, int n_decode) {
  Session s(m, SessionOptions{128});
  const size_t V = static_cast<size_t>(m.config().n_vocab);
  std::vector<float> out(prompt.size() * V);
  s.eval_all(prompt, out.data());
  int32_t tok = static_cast<int32_t>(prompt.size() % 7);
  for (int i = 0; i < n_decode; ++i) {
    const auto l = s.eval(std::span<const int32_t>(&tok, 1));
    out.insert(out.end(), l.begin(), l.end());
    tok = (tok * 31 + 5) % static_cast<int32_t>(V);
  }
  return out;
}

uint64_t repacked(LoadedModel& m) { return dynamic_cast<CpuOps&>(m.ops()).repacked_bytes(); }

class Repack : public ::testing::TestWithParam<Case> {
 protected:
  static void TearDownTestSuite() { test::remove_scratch(); }
};

TEST_P(Repack, LogitsAreBitIdenticalWithAndWithout) {
  if (cpu::detected_isa() < cpu::Isa::avx512)
    GTEST_SKIP() << "no interleaved-layout kernel on this CPU: the engine keeps the file layout";
  synth::Options o;
  o.arch = GetParam().arch;
  o.quant = GetParam().quant;
  o.seed = 5;
  const std::string name = std::string(synth::arch_name(o.arch)) + "-tiny-" +
                           std::string(synth::quant_mix_name(o.quant));
  const std::string path = test::write_plan(synth::make_plan(o), name);
  RunOptions on, off, tight;
  off.backend.cpu.repack = false;
  tight.backend.cpu.repack_budget = 64 * 1024;  // room for a few small matrices only
  const auto a = LoadedModel::load(path, {}, on);
  const auto b = LoadedModel::load(path, {}, off);
  const auto c = LoadedModel::load(path, {}, tight);
  EXPECT_GT(repacked(*a), 0u) << name;
  EXPECT_EQ(repacked(*b), 0u) << name;
  EXPECT_LE(repacked(*c), 64u * 1024) << name;
  EXPECT_GT(dynamic_cast<CpuOps&>(c->ops()).repack_skipped_bytes(), 0u) << name;
  std::mt19937 rng(9);
  std::vector<int32_t> prompt(9);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(a->config().n_vocab));
  const auto la = logits(*a, prompt, 3), lb = logits(*b, prompt, 3), lc = logits(*c, prompt, 3);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << name;
  EXPECT_EQ(std::memcmp(lc.data(), lb.data(), lc.size() * sizeof(float)), 0) << name;
}

INSTANTIATE_TEST_SUITE_P(
    Mixes, Repack,
    ::testing::Values(Case{synth::Arch::qwen3moe, synth::QuantMix::q4_0},
                      Case{synth::Arch::qwen3moe, synth::QuantMix::iq4_nl},
                      Case{synth::Arch::qwen3moe, synth::QuantMix::mxfp4_moe},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::q4_0},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::mxfp4_moe}),
    [](const auto& info) {
      return std::string(synth::arch_name(info.param.arch)) + "_" +
             std::string(synth::quant_mix_name(info.param.quant));
    });

}  // namespace
}  // namespace ferry
