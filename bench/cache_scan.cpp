// The host time of the expert cache's victim choice, per slot scanned. ExpertCache::insert scans
// every slot of the layer's size class for the policy's victim (offload/expert_cache.cpp
// `victim`: LRFU computes each slot's decayed score, an exp2; LRU compares last uses), on the
// host thread, for every copy-now miss, admission and prefetch. The simulator charges it per
// insert (docs/simulator.md, model revision 8); this program measures the per-slot figure with
// the engine's own cache.
//
// A cache of N slots in one group is filled, then every insert evicts (each scans all N slots, none
// pinned or empty). The engine's tick is its forward step (one a decoded token), so the clock moves
// on once every --per-tick inserts (default 64, about one token's misses in the H200's 16G decode
// with near-uniform routing): the slots' ages, hence LRFU's exp2 arguments, stay in the range a
// decode sees (a tick per insert would push them into exp2's underflow path, which costs more).
// Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so a machine shared with other work
// does not count the time slices it lost; the median of the repetitions.
//
//   bench_cache_scan [--slots 4000,2880] [--inserts 2000] [--per-tick 64] [-r 7]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
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

// Median ns per scanned slot of `inserts` evicting inserts into a full cache of n_slots.
double ns_per_slot(int32_t n_slots, EvictionPolicy policy, int32_t inserts, int32_t per_tick, int32_t reps) {
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
  std::vector<double> per_slot;
  for (int32_t r = 0; r < reps; ++r) {
    const double t0 = thread_cpu_ns();
    for (int32_t i = 0; i < inserts; ++i) insert_next();
    per_slot.push_back((thread_cpu_ns() - t0) / inserts / n_slots);
  }
  std::sort(per_slot.begin(), per_slot.end());
  return per_slot[per_slot.size() / 2];
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
    fmt::print("| slots scanned | policy | ns per slot (median of {}, thread CPU time) | us per insert |\n", reps);
    fmt::print("|---:|---|---:|---:|\n");
    for (int32_t n : slots)
      for (EvictionPolicy p : {EvictionPolicy::lrfu, EvictionPolicy::lru}) {
        const double ns = ns_per_slot(n, p, inserts, per_tick, reps);
        fmt::print("| {} | {} | {:.2f} | {:.1f} |\n", n, p == EvictionPolicy::lru ? "lru" : "lrfu", ns, ns * n / 1e3);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cache_scan: %s\n", e.what());
    return 1;
  }
  return 0;
}
