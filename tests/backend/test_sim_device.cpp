// The sim device: budget, peak, stream order, events, copies and the link model.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Device> sim(uint64_t budget = 0, SimLinkModel link = {}) {
  DeviceOptions o;
  o.budget_bytes = budget;
  o.sim_link = link;
  return make_device(DeviceKind::sim, o);
}

TEST(SimDevice, BudgetIsHard) {
  auto dev = sim(1 << 20);
  auto a = dev->alloc(600 << 10, "a");
  EXPECT_EQ(dev->memory().used_bytes, 600u << 10);
  try {
    auto b = dev->alloc(600 << 10, "expert slots");
    ADD_FAILURE() << "allocation beyond the budget succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    const std::string msg = e.what();
    // Names the request, what is in use and the budget.
    EXPECT_NE(msg.find("expert slots"), std::string::npos) << msg;
    EXPECT_NE(msg.find("600.00 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1.00 MiB"), std::string::npos) << msg;
  }
  // A failed allocation charges nothing.
  EXPECT_EQ(dev->memory().used_bytes, 600u << 10);
  EXPECT_EQ(dev->memory().n_allocs, 1u);
  auto c = dev->alloc(424 << 10, "exact fit");  // 600 K + 424 K = 1 M exactly
  EXPECT_EQ(dev->memory().used_bytes, 1u << 20);
  EXPECT_THROW(dev->alloc(1, "one more byte"), Error);
}

TEST(SimDevice, PeakAndRounding) {
  auto dev = sim(64 << 20);
  {
    auto a = dev->alloc(1000);  // charged as 1024 (256-byte granularity)
    EXPECT_EQ(dev->memory().used_bytes, 1024u);
    auto b = dev->alloc(3 << 20);
    EXPECT_EQ(dev->memory().used_bytes, 1024u + (3u << 20));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
  }
  EXPECT_EQ(dev->memory().used_bytes, 0u);
  EXPECT_EQ(dev->memory().peak_bytes, 1024u + (3u << 20));
  auto c = dev->alloc(1 << 20);
  EXPECT_EQ(dev->memory().peak_bytes, 1024u + (3u << 20));
  dev->reset_peak();
  EXPECT_EQ(dev->memory().peak_bytes, 1u << 20);
  // Moving a buffer does not double-free or double-release.
  DeviceBuffer moved = std::move(c);
  EXPECT_EQ(dev->memory().n_allocs, 1u);
  moved = DeviceBuffer();
  EXPECT_EQ(dev->memory().used_bytes, 0u);
}

TEST(SimDevice, StreamRunsInOrder) {
  auto dev = sim();
  auto s = dev->create_stream();
  std::vector<int> order;
  std::mutex mu;
  for (int i = 0; i < 200; ++i)
    s->host_fn([&, i] {
      if (i % 17 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard lock(mu);
      order.push_back(i);
    });
  s->synchronize();
  std::vector<int> expect(200);
  std::iota(expect.begin(), expect.end(), 0);
  EXPECT_EQ(order, expect);
}

TEST(SimDevice, CopiesRoundTripInStreamOrder) {
  auto dev = sim();
  auto s = dev->create_stream();
  const size_t n = 1 << 16;
  std::vector<float> src(n), back(n, 0.f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (auto& v : src) v = u(rng);
  auto d = dev->alloc(n * sizeof(float));
  auto d2 = dev->alloc(n * sizeof(float));
  s->copy_h2d(d.data(), src.data(), n * sizeof(float));
  s->copy_d2d(d2.data(), d.data(), n * sizeof(float));
  s->memset(d.data(), 0, n * sizeof(float));  // after the d2d copy: must not affect d2
  s->copy_d2h(back.data(), d2.data(), n * sizeof(float));
  s->synchronize();
  EXPECT_EQ(std::memcmp(src.data(), back.data(), n * sizeof(float)), 0);
  const CopyStats cs = dev->copies();
  EXPECT_EQ(cs.h2d_bytes, n * sizeof(float));
  EXPECT_EQ(cs.d2h_bytes, n * sizeof(float));
  EXPECT_EQ(cs.d2d_bytes, n * sizeof(float));
  EXPECT_EQ(cs.h2d_copies, 1u);
}

TEST(SimDevice, EventSemantics) {
  auto dev = sim();
  auto a = dev->create_stream();
  auto b = dev->create_stream();
  auto e = dev->create_event();
  EXPECT_TRUE(e->query());  // never recorded: complete

  std::atomic<bool> release{false}, a_done{false}, b_saw_a{false};
  a->host_fn([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    a_done = true;
  });
  a->record(*e);
  EXPECT_FALSE(e->query());  // a is blocked before the record
  b->wait(*e);
  b->host_fn([&] { b_saw_a = a_done.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(b_saw_a.load());  // b must still be waiting
  release = true;
  b->synchronize();
  EXPECT_TRUE(b_saw_a.load());
  e->synchronize();
  EXPECT_TRUE(e->query());

  // wait() binds to the record issued before it: a later record does not block an earlier wait.
  auto c = dev->create_stream();
  std::atomic<bool> gate{false};
  c->wait(*e);  // the completed record above
  a->host_fn([&] {
    while (!gate.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  });
  a->record(*e);  // pending
  std::atomic<bool> c_ran{false};
  c->host_fn([&] { c_ran = true; });
  c->synchronize();
  EXPECT_TRUE(c_ran.load());
  EXPECT_FALSE(e->query());
  gate = true;
  a->synchronize();
  EXPECT_TRUE(e->query());
}

TEST(SimDevice, EventTiming) {
  auto dev = sim();
  auto s = dev->create_stream();
  auto e0 = dev->create_event();
  auto e1 = dev->create_event();
  s->record(*e0);
  s->host_fn([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  s->record(*e1);
  s->synchronize();
  const double ms = e1->elapsed_ms_since(*e0);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 500.0);
}

TEST(SimDevice, HostFnErrorsSurfaceAtSynchronize) {
  auto dev = sim();
  auto s = dev->create_stream();
  std::atomic<bool> later_ran{false};
  s->host_fn([] { throw Error(ErrorKind::internal, "cpu expert failed"); });
  s->host_fn([&] { later_ran = true; });  // the stream keeps going (events must still complete)
  try {
    s->synchronize();
    ADD_FAILURE() << "error swallowed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu expert failed"), std::string::npos);
  }
  EXPECT_TRUE(later_ran.load());
  EXPECT_NO_THROW(s->synchronize());  // reported once
}

TEST(SimDevice, DeviceSynchronizeCoversAllStreams) {
  auto dev = sim();
  auto a = dev->create_stream();
  auto b = dev->create_stream();
  std::atomic<int> n{0};
  for (int i = 0; i < 10; ++i) {
    a->host_fn([&] { std::this_thread::sleep_for(std::chrono::microseconds(300)); ++n; });
    b->host_fn([&] { ++n; });
  }
  dev->synchronize();
  EXPECT_EQ(n.load(), 20);
}

// 1 MiB at 0.05 GB/s + 100 µs ≈ 21 ms per copy (far above memcpy time and scheduler jitter on a
// loaded CI machine, so the model dominates); 4 copies on one link ≈ 84 ms even when issued from
// two streams (they share the link).
TEST(SimDevice, LinkModelTiming) {
  SimLinkModel link;
  link.h2d_gbps = 0.05;
  link.d2h_gbps = 0.05;
  link.latency_us = 100;
  auto dev = sim(0, link);
  const size_t bytes = 1 << 20;
  auto host = dev->alloc_host(bytes);
  std::memset(host.data(), 1, bytes);
  auto d0 = dev->alloc(bytes), d1 = dev->alloc(bytes);
  auto s0 = dev->create_stream(), s1 = dev->create_stream();
  const double one_ms = (100e-6 + bytes / 0.05e9) * 1e3;

  auto t0 = Clock::now();
  s0->copy_h2d(d0.data(), host.data(), bytes);
  s0->synchronize();
  const double single = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_GE(single, one_ms * 0.95);
  EXPECT_LT(single, one_ms * 3 + 5);

  t0 = Clock::now();
  s0->copy_h2d(d0.data(), host.data(), bytes);
  s1->copy_h2d(d1.data(), host.data(), bytes);
  s0->copy_h2d(d0.data(), host.data(), bytes);
  s1->copy_h2d(d1.data(), host.data(), bytes);
  s0->synchronize();
  s1->synchronize();
  const double four = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_GE(four, 4 * one_ms * 0.95);
  EXPECT_LT(four, 4 * one_ms * 3 + 10);

  // The other direction is a separate link: a d2h copy overlaps an h2d copy.
  t0 = Clock::now();
  s0->copy_h2d(d0.data(), host.data(), bytes);
  s1->copy_d2h(host.data(), d1.data(), bytes);
  s0->synchronize();
  s1->synchronize();
  const double both = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(both, 1.5 * one_ms);  // serialised would be 2 × one_ms
}

TEST(SimDevice, HostMemory) {
  auto dev = sim();
  auto h = dev->alloc_host(12345);
  EXPECT_TRUE(h.pinned());
  EXPECT_EQ(h.bytes(), 12345u);
  std::memset(h.data(), 0x5a, h.bytes());
  auto p = dev->alloc_host(100, false);
  EXPECT_FALSE(p.pinned());
  std::vector<char> v(4096);
  auto reg = dev->register_host(v.data(), v.size());
  EXPECT_TRUE(reg.registered());
  EXPECT_THROW(make_device(DeviceKind::sim, DeviceOptions{0, 0, SimLinkModel{-1, 0, 0}}), Error);
}

}  // namespace
}  // namespace ferry
