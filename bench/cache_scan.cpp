// The host time of the expert cache's victim choice, per insert, and of a hit (ExpertCache::access).
// The engine inserts on the host thread for every copy-now miss, admission and prefetch. Up to
// 2026-12-05 an insert scanned every slot of the layer's size class (LRFU: an exp2 per slot; the
// simulator charges it per slot, docs/simulator.md, model revision 8: the old program printed ns
// per slot, bench/results/2026-12-05-cache-scan-devvm.md); now the cache keeps its slots in
// ordered sets (offload/expert_cache.hpp), so an insert costs O(log n) and a hit, which re-orders
// the slot, does too: both are measured.
//
// A cache of N slots in one group is filled, then every insert evicts (none pinned or empty). The engine's tick is its forward step (one a decoded token), so the clock moves
// on once every --per-tick inserts (default 64, about one token's misses in the H200's 16G decode
// with near-uniform routing): the slots' ages, hence LRFU's exp2 arguments, stay in the range a
// decode sees (a tick per insert would push them into exp2's underflow path, which costs more).
// Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a machine shared with other work
// does not count the time slices it lost; the median of the repetitions. A repetition times
// `--inserts` evicting inserts, then as many hits (accesses of resident experts drawn at random).
// A hit alone leaves part of its cost to the next insert since 2026-12-06 (its slot is re-listed
// lazily, offload/expert_cache.hpp), so a third figure times what the engine does per decode use:
// steps of 8 distinct experts of one layer (layers in turn, a tick every 40 steps, experts drawn
// skewed: e = 256·u⁴, ~40-60% of the uses hits at 2191-4000 slots), each used (access), a miss inserted
// and made ready, all pinned, then all unpinned at the end of the step; ns per use, all included.
//
//   bench_cache_scan [--slots 4000,2880] [--inserts 2000] [--per-tick 64] [-r 7]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "offload/expert_cache.hpp"
#include "runtime/core/error.hpp"

namespace {

using namespace ferry;

double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

struct Costs {
  double insert_ns, hit_ns, use_ns;  // medians
  double hit_rate;                   // of the decode uses
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ns per evicting insert into a full cache of n_slots, and per hit.
Costs measure(int32_t n_slots, EvictionPolicy policy, int32_t inserts, int32_t per_tick, int32_t reps) {
  constexpr int32_t kLayers = 40, kExperts = 256;  // 35b-a3b's shape: keys never run out
  if (n_slots >= kLayers * kExperts) fail(ErrorKind::invalid_arg, "--slots {}: at most {}", n_slots, kLayers * kExperts - 1);
  ExpertCache cache(n_slots, kLayers, kExperts, policy);
  int32_t key = 0, done = 0;
  uint64_t tick = 0;
  const auto insert_next = [&] {
    while (cache.find(key / kExperts, key % kExperts) >= 0) key = (key + 1) % (kLayers * kExperts);
    if (++done % per_tick == 0) ++tick;
    const int32_t slot = cache.insert(key / kExperts, key % kExperts, tick);
    if (slot < 0) fail(ErrorKind::internal, "no victim");
    cache.mark_ready(slot);
    key = (key + 1) % (kLayers * kExperts);
  };
  for (int32_t i = 0; i < n_slots; ++i) insert_next();  // fills every slot: from now on each insert evicts
  std::mt19937 rng(1);
  std::vector<int32_t> hit_slots(static_cast<size_t>(inserts));
  std::vector<double> per_insert, per_hit;
  for (int32_t r = 0; r < reps; ++r) {
    const double t0 = thread_cpu_ns();
    for (int32_t i = 0; i < inserts; ++i) insert_next();
    per_insert.push_back((thread_cpu_ns() - t0) / inserts);
    for (auto& s : hit_slots) s = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_slots));
    const double t1 = thread_cpu_ns();
    for (int32_t i = 0; i < inserts; ++i) {
      if (++done % per_tick == 0) ++tick;
      const int32_t s = hit_slots[static_cast<size_t>(i)];
      if (cache.access(cache.layer_of(s), cache.expert_of(s), tick) != s) fail(ErrorKind::internal, "no hit");
    }
    per_hit.push_back((thread_cpu_ns() - t1) / inserts);
  }
  // Decode steps: the routing is drawn before the clock starts.
  constexpr int32_t kTopK = 8;
  const int32_t n_steps = std::max(1, inserts / kTopK);
  std::vector<int32_t> route(static_cast<size_t>(n_steps * kTopK));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<double> per_use;
  int64_t uses = 0, hits = 0;
  int32_t step = 0;
  std::vector<int32_t> pinned;
  for (int32_t r = 0; r < reps; ++r) {
    for (int32_t i = 0; i < n_steps; ++i)
      for (int32_t j = 0; j < kTopK; ++j) {
        int32_t e = 0;
        bool again = true;
        while (again) {  // distinct experts within a step
          const double x = u01(rng);
          e = std::min(kExperts - 1, static_cast<int32_t>(kExperts * x * x * x * x));
          again = false;
          for (int32_t k = 0; k < j; ++k) again = again || route[static_cast<size_t>(i * kTopK + k)] == e;
        }
        route[static_cast<size_t>(i * kTopK + j)] = e;
      }
    const double t2 = thread_cpu_ns();
    for (int32_t i = 0; i < n_steps; ++i, ++step) {
      const int32_t layer = step % kLayers;
      if (step % kLayers == 0) ++tick;
      pinned.clear();
      for (int32_t j = 0; j < kTopK; ++j) {
        const int32_t e = route[static_cast<size_t>(i * kTopK + j)];
        int32_t slot = cache.access(layer, e, tick);
        ++uses;
        if (slot >= 0) {
          ++hits;
        } else {
          slot = cache.insert(layer, e, tick);
          if (slot < 0) continue;  // every slot pinned: on the CPU
          cache.mark_ready(slot);
        }
        cache.pin(slot);
        pinned.push_back(slot);
      }
      for (const int32_t slot : pinned) cache.unpin(slot);
    }
    per_use.push_back((thread_cpu_ns() - t2) / (n_steps * kTopK));
  }
  return {median(per_insert), median(per_hit), median(per_use),
          static_cast<double>(hits) / static_cast<double>(uses)};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int32_t> slots{4000, 2880};
    int32_t inserts = 2000, per_tick = 64, reps = 7;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) fail(ErrorKind::invalid_arg, "{}: needs a value", a);
      const std::string v = argv[++i];
      if (a == "--slots") {
        slots.clear();
        for (size_t at = 0; at <= v.size();) {
          const size_t comma = std::min(v.find(',', at), v.size());
          slots.push_back(std::stoi(v.substr(at, comma - at)));
          at = comma + 1;
        }
      } else if (a == "--inserts") {
        inserts = std::stoi(v);
      } else if (a == "--per-tick") {
        per_tick = std::stoi(v);
      } else if (a == "-r") {
        reps = std::stoi(v);
      } else {
        fail(ErrorKind::invalid_arg, "unknown flag {} (--slots N,..., --inserts N, --per-tick N, -r N)", a);
      }
    }
    if (inserts < 1 || per_tick < 1 || reps < 1)
      fail(ErrorKind::invalid_arg, "--inserts, --per-tick and -r must be >= 1");
    fmt::print("| slots in the class | policy | ns per insert (median of {}, thread CPU time) | ns per hit | ns per decode use | decode hits |\n", reps);
    fmt::print("|---:|---|---:|---:|---:|---:|\n");
    for (int32_t n : slots)
      for (EvictionPolicy p : {EvictionPolicy::lrfu, EvictionPolicy::lru}) {
        const Costs c = measure(n, p, inserts, per_tick, reps);
        fmt::print("| {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.1f}% |\n", n, p == EvictionPolicy::lru ? "lru" : "lrfu", c.insert_ns,
                   c.hit_ns, c.use_ns, 100.0 * c.hit_rate);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cache_scan: %s\n", e.what());
    return 1;
  }
  return 0;
}
