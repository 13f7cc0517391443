// What one decoded token of a resident model costs the host with `--cuda-graphs on`, counted by
// the CUDA emulator: one graph launch, no stream, event or device synchronisation and no device→host copy other than the
// logits read (into page-locked memory) — and with --stats one asynchronous routing-log copy more. Through the engine as the
// CLI loads a model (MoeSetup builds the executor), with and without a --vram above the model's
// size (which must fall back to the resident executor, with nothing in front of it), with and
// without --stats.
#include <gtest/gtest.h>

#include <numeric>

#include "gpu_test_util.hpp"
#include "tiny_model.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/engine/engine.hpp"
#include "runtime/synth/synth.hpp"

#if defined(FERRY_CUDA_EMU)
#include "ferry_emu_counters.h"
#endif

namespace ferry::gputest {
namespace {

#if defined(FERRY_CUDA_EMU)

struct PerToken {
  double graph_launches, stream_syncs, event_syncs, device_syncs, d2h_copies, pageable_waits;
};

// Loads through the engine, prefills 12 tokens, warms up two decode steps (the first is eager and
// the second instantiates the graph), then counts over 6 decode steps.
PerToken count_decode(const std::string& path, const std::string& vram, bool stats) {
  RunOptions ro;
  ro.device = DeviceKind::cuda;
  if (!vram.empty()) ro.vram_bytes = parse_size(vram);  // the run's one budget (--vram)
  ro.observe.stats = stats;
  ro.backend.cuda.graphs = true;  // --cuda-graphs on (off by default)
  auto m = LoadedModel::load(path, {}, ro);
  EXPECT_EQ(m->moe().offload(), nullptr)
      << "a budget above the model's size keeps every expert resident";
  Session s(*m);
  std::vector<int32_t> prompt(12);
  std::iota(prompt.begin(), prompt.end(), 3);
  s.eval(prompt);
  const int32_t one[] = {7};
  for (int i = 0; i < 2; ++i) s.eval(one);
  constexpr int kTokens = 6;
  const ferry_emu::ApiCounts a = ferry_emu::api_counts();
  for (int i = 0; i < kTokens; ++i) s.eval(one);
  const ferry_emu::ApiCounts b = ferry_emu::api_counts();
  m->moe().finish();
  if (stats) {
    // The observers saw every token, read back from the routing log.
    const RoutingStatsObserver* rs = m->moe().routing_stats();
    EXPECT_NE(rs, nullptr);
    if (rs) {
      EXPECT_EQ(rs->locality().layer(0).tokens, static_cast<int64_t>(prompt.size() + 2 + kTokens));
    }
  }
  const auto per = [&](uint64_t after, uint64_t before) {
    return static_cast<double>(after - before) / kTokens;
  };
  return {per(b.graph_launches, a.graph_launches), per(b.stream_syncs, a.stream_syncs),
          per(b.event_syncs, a.event_syncs), per(b.device_syncs, a.device_syncs),
          per(b.d2h_copies, a.d2h_copies), per(b.pageable_waits, a.pageable_waits)};
}

TEST(GpuSyncCounts, ResidentDecodeIsOneGraphAndTheLogitsRead) {
  FERRY_REQUIRE_GPU();
  for (synth::Arch arch : {synth::Arch::qwen3moe, synth::Arch::qwen35moe}) {
    const std::string path = tiny_model(arch, "sync", 5);
    for (const char* vram : {"", "900M"})
      for (const bool stats : {false, true}) {
        const PerToken p = count_decode(path, vram, stats);
        const std::string what = std::string(synth::arch_name(arch)) +
                                 (*vram ? " --vram 900M" : "") + (stats ? " --stats" : "");
        EXPECT_EQ(p.graph_launches, 1.0) << what;
        EXPECT_EQ(p.stream_syncs, 1.0) << what << " (the logits read's)";
        EXPECT_EQ(p.event_syncs, 0.0) << what;
        EXPECT_EQ(p.device_syncs, 0.0) << what;
        EXPECT_EQ(p.d2h_copies, stats ? 2.0 : 1.0)
            << what << " (logits" << (stats ? " + routing log)" : ")");
        // Both land in page-locked memory (Session's logits, the routing log's host side): no copy
        // waits for the driver's pageable staging.
        EXPECT_EQ(p.pageable_waits, 0.0) << what;
      }
  }
}

#else

TEST(GpuSyncCounts, ResidentDecodeIsOneGraphAndTheLogitsRead) {
  GTEST_SKIP() << "counted by the CUDA emulator (FERRY_CUDA=EMU); on a GPU, nsys shows the same";
}

#endif

}  // namespace
}  // namespace ferry::gputest
