// The routing/observability flags end to end through the built `ferry` binary on a tiny synthetic
// qwen3moe: record → replay gives the same trace file byte for byte (model and locality routing),
// the trace JSON parses and holds the MoE steps and forwards, --stats prints its tables, a bad
// --routing fails cleanly. Skipped when the binary has not been built.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/moe/routing_trace.hpp"
#include "runtime/synth/synth.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {

std::string ferry_binary() { return std::string(FERRY_BINARY_DIR) + "/ferry"; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class RoutingCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ferry-test-routing-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    synth::Options o;
    o.quant = synth::QuantMix::f32;
    o.seed = 3;
    synth::WriteOptions w;
    w.threads = 2;
    synth::write_model(synth::make_plan(o), (dir_ / "tiny.gguf").string(), w);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (!fs::exists(ferry_binary())) GTEST_SKIP() << ferry_binary() << " not built";
  }
  // Runs `ferry run` on the tiny model with greedy sampling; returns the exit status.
  int run(const std::string& extra, const std::string& log = "log.txt") {
    const std::string cmd = ferry_binary() + " run -m " + (dir_ / "tiny.gguf").string() +
                            " --tokens 1,2,3,4,5,6 -n 20 --temp 0 -t 2 " + extra + " > " + (dir_ / log).string() +
                            " 2>&1";
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  static fs::path dir_;
};
fs::path RoutingCli::dir_;

}  // namespace

TEST_F(RoutingCli, RecordReplayIsExact) {
  const auto p = [&](const char* n) { return (dir_ / n).string(); };
  ASSERT_EQ(run("--record-routing " + p("a.frrt")), 0) << slurp(dir_ / "log.txt");
  ASSERT_EQ(run("--routing trace:" + p("a.frrt") + " --record-routing " + p("b.frrt")), 0) << slurp(dir_ / "log.txt");
  EXPECT_EQ(slurp(dir_ / "a.frrt"), slurp(dir_ / "b.frrt"));
  const RoutingTrace a = read_routing_trace(p("a.frrt"));
  // prompt 6 + 19 decoded tokens (the 20th is sampled, not evaluated)
  EXPECT_EQ(a.tokens(0), 25);

  ASSERT_EQ(run("--routing locality --routing-seed 5 --record-routing " + p("c.frrt")), 0) << slurp(dir_ / "log.txt");
  ASSERT_EQ(run("--routing trace:" + p("c.frrt") + " --record-routing " + p("d.frrt")), 0);
  EXPECT_EQ(slurp(dir_ / "c.frrt"), slurp(dir_ / "d.frrt"));
  const RoutingTrace c = read_routing_trace(p("c.frrt"));
  EXPECT_NE(a.ids, c.ids);  // locality routing is not the model's
}

TEST_F(RoutingCli, TraceAndStats) {
  const std::string trace = (dir_ / "t.json").string();
  ASSERT_EQ(run("--stats --trace " + trace, "stats.txt"), 0) << slurp(dir_ / "stats.txt");
  const std::string log = slurp(dir_ / "stats.txt");
  EXPECT_NE(log.find("routing locality"), std::string::npos) << log;
  EXPECT_NE(log.find("routing prediction"), std::string::npos) << log;
  std::ifstream f(trace);
  const auto j = nlohmann::json::parse(f);
  int moe = 0, forward = 0, ops = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "moe") ++moe;
    if (e.at("name") == "forward") ++forward;
    if (e.at("cat") == "op") ++ops;
  }
  const int n_layer = synth::make_plan({}).hp.n_layer;
  EXPECT_EQ(moe, n_layer * 20);  // one prefill + 19 decode steps, every layer
  EXPECT_EQ(forward, 20);
  EXPECT_GT(ops, moe);
}

TEST_F(RoutingCli, BadRoutingFailsCleanly) {
  EXPECT_NE(run("--routing sometimes"), 0);
  EXPECT_NE(slurp(dir_ / "log.txt").find("--routing"), std::string::npos);
  EXPECT_NE(run("--routing trace:" + (dir_ / "missing.frrt").string()), 0);
}
