// A context whose state does not fit in host RAM is refused before anything is allocated, with
// the figures and the largest context that fits; one that fits runs. The limit is lowered through
// SessionOptions::host_memory_bytes (the default is MemAvailable minus a reserve).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/model/model.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

class SessionMemory : public ::testing::TestWithParam<synth::Arch> {};

TEST_P(SessionMemory, ContextBeyondTheLimitIsRefusedWithTheLargestThatFits) {
  synth::Options so;
  so.arch = GetParam();
  so.preset = synth::Preset::tiny;
  so.quant = synth::QuantMix::f32;
  so.seed = 4;
  auto m = LoadedModel::load(test::write_plan(synth::make_plan(so), std::string(synth::arch_name(GetParam())) + "-mem"));

  StateOptions st;
  st.n_ctx = 4096;
  const StateFootprint fp = state_footprint(m->config(), st);
  const uint64_t fixed = fp.recurrent_bytes + fp.workspace_bytes;
  const uint64_t per_token = fp.kv_bytes / 4096;
  ASSERT_GT(per_token, 0u);

  SessionOptions o;
  o.n_ctx = 4096;
  o.host_memory_bytes = fixed + per_token * 1000 + per_token / 2;  // room for 1000 tokens
  try {
    Session s(*m, o);
    FAIL() << "a context of 4096 tokens fit in room for 1000";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("4096 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("-c 1000 or less"), std::string::npos) << msg;
  }
  o.n_ctx = 1000;
  Session s(*m, o);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  EXPECT_EQ(s.eval(prompt).size(), static_cast<size_t>(m->config().n_vocab));
}

TEST(SessionMemoryDefault, AbsurdContextIsRefusedAgainstMemAvailable) {
  auto m = LoadedModel::load(test::write_plan(test::tiny_plan(), "qwen3moe-mem-default"));
  SessionOptions o;
  o.n_ctx = 2000000000;  // ~2e9 tokens: far beyond any machine's RAM, even for a tiny model
  EXPECT_THROW(Session(*m, o), Error);
}

INSTANTIATE_TEST_SUITE_P(Archs, SessionMemory, ::testing::Values(synth::Arch::qwen3moe, synth::Arch::qwen35moe),
                         [](const auto& i) { return std::string(synth::arch_name(i.param)); });

}  // namespace
}  // namespace ferry
