// Host time of ONE expert's decode on the CPU (runtime/moe/cpu_experts.cpp `compute_decode`, the
// engine's CPU-expert path at one token), against its bytes: the per-expert cost the offload
// engine's cold decision weighs against a copy. Two ways, both with the engine's code:
//   warm — the same expert 4 times, best time: what the engine's start-up calibration times
//          (offload/cost_model.cpp `calibrate_rates`: expert 0 of layer 0, best of 4), so after
//          the first call its weights are in the CPU's caches;
//   cold — a different expert each call, cycling through a pool far larger than the caches
//          (what a decode miss reads), median time.
// The intercept of time against bytes over the shapes given (fixed per-call cost: task
// dispatch, the activations' quantization, the join) is printed beside the slope.
// The simulator (docs/simulator.md, "The cold-miss decision") times a one-expert CPU decode as
// its bytes at the CPU experts' whole-pool rate, with no fixed part.
//
//   bench_expert_cpu_time [--threads 1,2] [--pool 96] [--calls 200]
//                         [--shapes 2048x512:q4_k/q4_k/q6_k,2048x512:q4_k/q4_k/q4_k,...]
// A shape is n_embd x n_ff : gate/up/down types (default: the 35b-a3b Q4_K_M layers' two
// experts, then the same at half and double n_ff for the intercept). Weights are random bytes
// (the kernels' time does not depend on the values).
#include <fmt/format.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/types.hpp"
#include "runtime/moe/cpu_experts.hpp"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

GgmlType type_named(const std::string& name) {
  if (const std::optional<GgmlType> t = type_from_name(name)) return *t;
  fail(ErrorKind::invalid_arg, "--shapes: unknown type '{}'", name);
}

ExpertShape parse_shape(const std::string& s) {
  const std::vector<std::string> dims_types = split(s, ':');
  const std::vector<std::string> dims = split(dims_types.at(0), 'x');
  const std::vector<std::string> types = dims_types.size() == 2 ? split(dims_types[1], '/') : std::vector<std::string>{};
  if (dims.size() != 2 || types.size() != 3)
    fail(ErrorKind::invalid_arg, "--shapes '{}': want N_EMBDxN_FF:GATE/UP/DOWN", s);
  ExpertShape e;
  e.n_embd = std::stoll(dims[0]);
  e.n_ff = std::stoll(dims[1]);
  e.gate_type = type_named(types[0]);
  e.up_type = type_named(types[1]);
  e.down_type = type_named(types[2]);
  return e;
}

struct Pool {
  std::vector<std::vector<uint8_t>> bytes;  // (pool) one expert's three matrices, back to back
  std::vector<ExpertPtrs> ptrs;
};

Pool make_pool(const ExpertShape& s, int32_t n) {
  Pool p;
  std::mt19937_64 rng(1);
  p.bytes.resize(static_cast<size_t>(n));
  for (auto& b : p.bytes) {
    b.resize(s.expert_bytes());
    for (size_t i = 0; i + 8 <= b.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(b.data() + i, &v, 8);
    }
    p.ptrs.push_back({b.data(), b.data() + s.gate_bytes(), b.data() + s.gate_bytes() + s.up_bytes()});
  }
  return p;
}

double call_us(const ExpertShape& s, const ExpertPtrs& w, const std::vector<float>& x, std::vector<float>& y) {
  const uint8_t one = 1;
  const auto t0 = Clock::now();
  compute_decode(s, x.data(), std::span<const ExpertPtrs>(&w, 1), std::span<const uint8_t>(&one, 1), y.data());
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  std::string threads = "1,2",
              shapes = "2048x512:q4_k/q4_k/q6_k,2048x512:q4_k/q4_k/q4_k,2048x256:q4_k/q4_k/q4_k,2048x1024:q4_k/q4_k/q4_k";
  int32_t pool = 96, calls = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = argv[i + 1];
    else if (a == "--shapes") shapes = argv[i + 1];
    else if (a == "--pool") pool = std::atoi(argv[i + 1]);
    else if (a == "--calls") calls = std::atoi(argv[i + 1]);
    else fail(ErrorKind::invalid_arg, "unknown option {}", a);
  }
  if (argc % 2 == 0) fail(ErrorKind::invalid_arg, "{}: option without a value", argv[argc - 1]);
  if (pool < 2 || calls < 1) fail(ErrorKind::invalid_arg, "--pool at least 2, --calls at least 1");
  fmt::print("| threads | shape | expert bytes | warm best of 4 (us) | warm GB/s | cold median (us) | cold GB/s |\n");
  fmt::print("|---:|---|---:|---:|---:|---:|---:|\n");
  for (const std::string& t : split(threads, ',')) {
    const int n_threads = std::stoi(t);
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(n_threads));
    std::vector<std::pair<double, double>> cold_points;  // (bytes, us)
    for (const std::string& sh : split(shapes, ',')) {
      const ExpertShape s = parse_shape(sh);
      const Pool p = make_pool(s, pool);
      std::vector<float> x(static_cast<size_t>(s.n_embd)), y(static_cast<size_t>(s.n_embd));
      std::mt19937 rng(7);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : x) v = nd(rng);
      double warm = 1e30;
      for (int i = 0; i < 4; ++i) warm = std::min(warm, call_us(s, p.ptrs[0], x, y));
      std::vector<double> cold;
      for (int i = 0; i < calls; ++i) cold.push_back(call_us(s, p.ptrs[static_cast<size_t>(1 + i % (pool - 1))], x, y));
      std::sort(cold.begin(), cold.end());
      const double med = cold[cold.size() / 2];
      const double b = double(s.expert_bytes());
      cold_points.emplace_back(b, med);
      fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", n_threads, sh, s.expert_bytes(), warm,
                 b / (warm * 1e3), med, b / (med * 1e3));
    }
    // Least squares of the cold medians against bytes: intercept (fixed us per call) and rate.
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto [b, us] : cold_points) sx += b, sy += us, sxx += b * b, sxy += b * us;
    const double n = double(cold_points.size());
    const double den = n * sxx - sx * sx;
    if (n >= 2 && den > 0) {
      const double slope = (n * sxy - sx * sy) / den;
      fmt::print("\n{} thread(s), cold: {:.1f} us fixed per call + bytes at {:.1f} GB/s (least squares over the "
                 "{} shapes)\n\n", n_threads, (sy - slope * sx) / n, 1e-3 / slope, cold_points.size());
    }
  }
  return 0;
} catch (const ferry::Error& e) {
  std::fprintf(stderr, "bench_expert_cpu_time: %s\n", e.what());
  return 1;
}
