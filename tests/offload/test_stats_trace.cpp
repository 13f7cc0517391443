// Stats counters (concurrent updates, snapshot, table), routing locality with its reuse-distance
// histogram on hand-made and periodic traces, and the Chrome/Perfetto trace writer
// (valid JSON parsed back with nlohmann-json, spans from threads, the model-hook spans, atomic
// write).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "runtime/moe/observers.hpp"
#include "runtime/moe/stats.hpp"
#include "runtime/moe/stats_routing.hpp"
#include "runtime/moe/trace.hpp"
#include "runtime/core/error.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ferry-test-trace-" + std::to_string(::getpid()) + "-" + name)).string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}


}  // namespace

TEST(Stats, ConcurrentCountersAndTable) {
  StatsCounters s(3);
  constexpr int kThreads = 4, kIters = 20000;
  std::vector<std::thread> th;
  for (int i = 0; i < kThreads; ++i)
    th.emplace_back([&, i] {
      for (int j = 0; j < kIters; ++j) {
        s.hit(j % 3);
        if (j % 4 == 0) s.miss(i % 3);
        if (j % 8 == 0) s.cpu_expert(i % 3);
        s.h2d(j % 5 == 0 ? -1 : 1, 10);
        s.wait(WaitCause::copy, 3);
        s.vram_in_use(static_cast<uint64_t>(i * kIters + j));
      }
    });
  for (auto& t : th) t.join();
  s.prefetch_issued(2, 1000);
  s.prefetch_issued(2, 1000);
  s.prefetch_used(2);
  s.prefetch_wasted(2, 1000);
  s.tokens(10);
  s.hit(7);   // out of range: ignored
  s.miss(-1);
  const auto snap = s.snapshot();
  EXPECT_EQ(snap.total.hit, uint64_t(kThreads * kIters));
  EXPECT_EQ(snap.layers[0].hit + snap.layers[1].hit + snap.layers[2].hit, snap.total.hit);
  EXPECT_EQ(snap.total.miss, uint64_t(kThreads * kIters / 4));
  EXPECT_EQ(snap.total.cpu_expert, uint64_t(kThreads * kIters / 8));
  EXPECT_EQ(snap.total.h2d_bytes, uint64_t(kThreads * kIters * 10));
  EXPECT_EQ(snap.layers[1].h2d_bytes, uint64_t(kThreads * kIters * 8));  // 4 of 5 went to layer 1
  EXPECT_EQ(snap.wait_ns[0], uint64_t(kThreads * kIters * 3));
  EXPECT_EQ(snap.vram_peak_bytes, uint64_t(kThreads * kIters - 1));
  EXPECT_EQ(snap.layers[2].prefetch_issued, 2u);
  EXPECT_EQ(snap.layers[2].prefetch_issued_bytes, 2000u);
  EXPECT_EQ(snap.layers[2].prefetch_wasted_bytes, 1000u);
  EXPECT_EQ(snap.tokens, 10u);
  const std::string table = stats_table(snap);
  EXPECT_NE(table.find("all"), std::string::npos);
  EXPECT_NE(table.find("VRAM peak"), std::string::npos);
  EXPECT_NE(table.find("cpu_expert"), std::string::npos);
  // layer 2's prefetch precision: 1 used of 2 issued
  EXPECT_NE(table.find("50.0"), std::string::npos);
  s.reset();
  EXPECT_EQ(s.snapshot().total.hit, 0u);
  EXPECT_EQ(s.snapshot().vram_peak_bytes, 0u);
}

TEST(Trace, DisabledRecordsNothing) {
  Tracer t;
  EXPECT_FALSE(t.enabled());
  t.complete("x", "op", 0, 1);
  { Tracer::Span s(&t, "y", "op"); }
  { Tracer::Span s(nullptr, "z", "op"); }
  EXPECT_EQ(t.events(), 0u);
  t.write();  // no file, no error
}

TEST(Trace, JsonParsesBackWithThreadsTracksAndHookSpans) {
  const std::string path = tmp_path("a.json");
  {
    std::ofstream f(path);
    f << "previous contents";
  }
  Tracer t(path);
  t.set_thread_name("main \"thread\"");
  t.set_track_name(Tracer::kTrackBase, "copy stream");
  {
    Tracer::Span s(&t, "outer", "op", {{"layer", 3}, {"tokens", 1}});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::thread worker([&] {
    for (int i = 0; i < 5; ++i) {
      Tracer::Span s(&t, "cpu expert", "cpu_expert", {{"expert", i}});
    }
  });
  worker.join();
  t.complete("h2d", "copy", 100, 5000, {{"bytes", 1 << 20}}, Tracer::kTrackBase);

  // The model hook: two forwards of a 2-layer toy, the second with logits.
  auto hook = trace_debug_hook(t);
  int dumped = 0;
  auto chained = trace_debug_hook(t, [&](std::string_view, int32_t, const float*, int64_t, int64_t) { ++dumped; });
  for (int f = 0; f < 2; ++f) {
    hook("inp_embd", -1, nullptr, 1, 8);
    for (int l = 0; l < 2; ++l) {
      hook("attn_norm", l, nullptr, 1, 8);
      hook("ffn_moe_out", l, nullptr, 1, 8);
    }
    if (f == 1) hook("result_output", -1, nullptr, 1, 32);
  }
  chained("inp_embd", -1, nullptr, 1, 8);
  EXPECT_EQ(dumped, 1);

  // --trace's observer: one "moe" span per live step; a step read back from a device log has none.
  TraceObserver moe_trace(t);
  RoutingView live;
  live.layer = 5;
  live.n_tokens = 2;
  moe_trace.on_routing(live);
  moe_trace.on_step_end(5);
  RoutingView logged = live;
  logged.live = false;
  moe_trace.on_routing(logged);
  moe_trace.on_step_end(5);
  t.write();
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const auto j = read_json(path);
  ASSERT_TRUE(j.contains("traceEvents"));
  const auto& ev = j["traceEvents"];
  int n_outer = 0, n_cpu = 0, n_copy = 0, n_ops = 0, n_forward = 0, n_moe = 0, n_meta = 0;
  std::set<int> cpu_tids;
  int main_tid = -1;
  for (const auto& e : ev) {
    ASSERT_TRUE(e.contains("name") && e.contains("ph") && e.contains("pid") && e.contains("tid"));
    if (e["ph"] == "M") {
      ++n_meta;
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    const std::string name = e["name"];
    if (name == "outer") {
      ++n_outer;
      EXPECT_EQ(e["args"]["layer"], 3);
      EXPECT_GE(e["dur"].get<double>(), 1500.0);  // slept 2 ms
      main_tid = e["tid"];
    } else if (name == "cpu expert") {
      ++n_cpu;
      cpu_tids.insert(e["tid"].get<int>());
    } else if (name == "h2d") {
      ++n_copy;
      EXPECT_EQ(e["tid"], Tracer::kTrackBase);
      EXPECT_EQ(e["args"]["bytes"], 1 << 20);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.1);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 5.0);
    } else if (name == "forward") {
      ++n_forward;
    } else if (name == "moe") {
      ++n_moe;
      EXPECT_EQ(e["args"]["layer"], 5);
      EXPECT_EQ(e["args"]["tokens"], 2);
    } else if (e["cat"] == "op") {
      ++n_ops;
    }
  }
  EXPECT_EQ(n_outer, 1);
  EXPECT_EQ(n_cpu, 5);
  ASSERT_EQ(cpu_tids.size(), 1u);
  EXPECT_NE(*cpu_tids.begin(), main_tid);  // the worker got its own row
  EXPECT_EQ(n_copy, 1);
  EXPECT_EQ(n_ops, 2 * 4 + 1);  // 4 intermediates per forward after inp_embd, + result_output
  EXPECT_EQ(n_forward, 2);      // the first closed by the second's inp_embd, the second by result_output
  EXPECT_EQ(n_moe, 1);
  EXPECT_EQ(n_meta, 2);
  fs::remove(path);
}

TEST(Trace, UnwritablePathIsAnIoError) {
  Tracer t("/nonexistent-dir-ferry/x.json");
  t.complete("x", "op", 0, 1);
  try {
    t.write();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
  }
}

TEST(Stats, RoutingLocalityHandMade) {
  RoutingLocalityStats s(2, 4, /*window=*/2);
  // layer 0, tokens {0,1} {1,2} | {2,3} {0,1} (a batch of two, then another)
  const int32_t a[4] = {0, 1, 1, 2}, b[4] = {2, 3, 0, 1};
  s.observe(0, a, 2, 2);
  s.observe(0, b, 2, 2);
  s.observe(5, a, 2, 2);  // unknown layer: ignored
  const auto l = s.layer(0);
  EXPECT_EQ(l.tokens, 4);
  EXPECT_DOUBLE_EQ(l.repeat_next, 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(l.recur_window, 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(l.top_half_share, 5.0 / 8.0);
  EXPECT_EQ(l.distinct, 4);
  EXPECT_EQ(s.layer(1).tokens, 0);
  EXPECT_NE(s.table().find("recur-in-2%"), std::string::npos);
  // Reuse distances from token 1 on: 1 and 2 at token 1 (d1, first), 2 and 3 at token 2 (d1,
  // first), 0 and 1 at token 3 (d3, d2). Bin 1 is repeat-next's numerator.
  using R = RoutingLocalityStats;
  const R::ReuseHistogram want{2, 1, 1, 0, 0, 0, 0, 0, 2};
  EXPECT_EQ(l.reuse, want);
  EXPECT_EQ(l.reuse[0], 2);
}

TEST(Stats, ReuseDistanceBins) {
  using R = RoutingLocalityStats;
  const std::pair<int64_t, int> cases[] = {{1, 0},  {2, 1},      {3, 2},  {4, 2},  {5, 3},
                                           {8, 3},  {9, 4},      {16, 4}, {33, 6}, {64, 6},
                                           {65, 7}, {100000, 7}, {0, 8},  {-1, 8}};
  for (auto [d, bin] : cases) EXPECT_EQ(R::reuse_bin(d), bin) << d;
  EXPECT_EQ(R::reuse_bin_name(0), "1");
  EXPECT_EQ(R::reuse_bin_name(2), "3-4");
  EXPECT_EQ(R::reuse_bin_name(6), "33-64");
  EXPECT_EQ(R::reuse_bin_name(7), ">64");
  EXPECT_EQ(R::reuse_bin_name(8), "first");
}

// A constructed trace whose histogram is known: one expert per token, cycling with period P in
// layer l (P = 1, 3, 6, 100): from token 1 on, tokens 1..P−1 use an expert for the first time and
// every later token the expert of P tokens before.
TEST(Stats, ReuseDistanceHistogramOfPeriodicTraces) {
  using R = RoutingLocalityStats;
  const int64_t T = 300;
  const int32_t periods[] = {1, 3, 6, 100};
  R s(4, 128);
  for (int32_t l = 0; l < 4; ++l)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t e = static_cast<int32_t>(t % periods[l]);
      s.observe(l, &e, 1, 1);
    }
  R::ReuseHistogram pooled{};
  for (int32_t l = 0; l < 4; ++l) {
    const int32_t p = periods[l];
    R::ReuseHistogram want{};
    want[static_cast<size_t>(R::reuse_bin(p))] = T - p;
    want[R::kReuseBins - 1] = p - 1;
    EXPECT_EQ(s.layer(l).reuse, want) << "period " << p;
    for (int b = 0; b < R::kReuseBins; ++b)
      pooled[static_cast<size_t>(b)] += want[static_cast<size_t>(b)];
  }
  EXPECT_EQ(s.all().reuse, pooled);
  EXPECT_DOUBLE_EQ(s.layer(0).repeat_next, 1.0);
  // The table prints shares: layer 1 (period 3) has (T − 3) / (T − 1) of its uses at 3-4.
  const std::string table = s.table();
  EXPECT_NE(table.find("reuse distance"), std::string::npos) << table;
  EXPECT_NE(table.find(fmt::format("{:>6.1f}", 100.0 * (T - 3) / (T - 1))), std::string::npos)
      << table;
  EXPECT_NE(table.find(" first"), std::string::npos) << table;
}
