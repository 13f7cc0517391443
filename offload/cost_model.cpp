#include "offload/cost_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "runtime/moe/cpu_experts.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

double tiles(int64_t n_tokens) {
  return std::ceil(static_cast<double>(std::max<int64_t>(n_tokens, 1)) / 4.0);
}

// The largest figure of a {"1MiB": x, "4MiB+": y} map or a plain number (the steady-state rate).
double rate_of(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  double best = 0;
  if (v.is_object())
    for (const auto& [k, x] : v.items())
      if (x.is_number()) best = std::max(best, x.get<double>());
  if (v.is_array())
    for (const auto& x : v)
      if (x.is_number()) best = std::max(best, x.get<double>());
  return best;
}

}  // namespace

const char* cold_choice_name(ColdChoice c) {
  switch (c) {
    case ColdChoice::wait_prefetch:
      return "wait";
    case ColdChoice::cpu:
      return "cpu";
    case ColdChoice::copy_now:
      return "copy";
    case ColdChoice::mapped:
      return "mapped";
  }
  return "?";
}

double CostModel::copy_us(uint64_t bytes) const {
  return r_.copy_latency_us + static_cast<double>(bytes) / (r_.h2d_gbps * 1e3);
}

double CostModel::device_us(uint64_t bytes, int64_t n_tokens) const {
  return static_cast<double>(bytes) / (r_.device_gbps * 1e3) * tiles(n_tokens);
}

double CostModel::cpu_us(uint64_t bytes, int64_t n_tokens) const {
  return r_.cpu_handoff_us + static_cast<double>(bytes) / (r_.cpu_gbps * 1e3) * tiles(n_tokens);
}

double CostModel::mapped_us(uint64_t bytes, int64_t n_tokens) const {
  if (r_.mapped_gbps <= 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(bytes) / (r_.mapped_gbps * 1e3) * tiles(n_tokens);
}

ColdChoice CostModel::choose(uint64_t bytes, int64_t n_tokens, double remaining_prefetch_us,
                             double link_queue_us, bool mapped_ok) const {
  const double cpu = cpu_us(bytes, n_tokens);
  const double dev = device_us(bytes, n_tokens);
  const double queue = std::max(0.0, link_queue_us);
  ColdChoice c;
  double c_us;
  if (remaining_prefetch_us >= 0) {
    const double wait = remaining_prefetch_us + dev;
    c = wait <= cpu ? ColdChoice::wait_prefetch : ColdChoice::cpu;
    c_us = std::min(wait, cpu);
  } else {
    const double copy = queue + copy_us(bytes) + dev;
    c = copy < cpu ? ColdChoice::copy_now : ColdChoice::cpu;
    c_us = std::min(copy, cpu);
  }
  // Reading in place shares the link with the queued copies; it wins only when strictly cheaper.
  if (mapped_ok && queue + mapped_us(bytes, n_tokens) < c_us) return ColdChoice::mapped;
  return c;
}

HardwareRates rates_from_profile(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail(ErrorKind::io, "cannot open hardware profile {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail(ErrorKind::format, "hardware profile {}: not a JSON object", path);
  HardwareRates r;
  r.source = path;
  if (j.contains("h2d_pinned_gbps")) r.h2d_gbps = rate_of(j["h2d_pinned_gbps"]);
  if (j.contains("vram_read_gbps")) r.device_gbps = rate_of(j["vram_read_gbps"]);
  // CPU experts run on all threads: the best host DRAM read figure bounds them.
  if (j.contains("host_dram_read_gbps")) r.cpu_gbps = rate_of(j["host_dram_read_gbps"]);
  if (j.contains("kernel_launch_us") && j["kernel_launch_us"].is_number())
    r.copy_latency_us = 2 * j["kernel_launch_us"].get<double>();
  if (j.contains("mapped_read_gbps")) r.mapped_gbps = rate_of(j["mapped_read_gbps"]);
  if (j.contains("launch_sync_roundtrip_us") && j["launch_sync_roundtrip_us"].is_number())
    r.cpu_handoff_us = j["launch_sync_roundtrip_us"].get<double>();
  if (r.h2d_gbps <= 0 || r.device_gbps <= 0 || r.cpu_gbps <= 0 || r.mapped_gbps < 0)
    fail(ErrorKind::format, "hardware profile {}: rates must be positive", path);
  return r;
}

HardwareRates calibrate_rates(Device& dev, const ExpertShape& s, const ExpertPtrs& host,
                              void* slot, const HardwareRates& base) {
  using Clock = std::chrono::steady_clock;
  const uint64_t bytes = s.expert_bytes();
  // CPU: best of a few decode steps of one expert (the first warms caches and thread pools).
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(s.n_embd)), y(static_cast<size_t>(s.n_embd));
  for (auto& v : x) v = nd(rng);
  const uint8_t one = 1;
  double best_us = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    compute_decode(s, x.data(), std::span<const ExpertPtrs>(&host, 1),
                   std::span<const uint8_t>(&one, 1), y.data());
    best_us =
        std::min(best_us, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  // Link: one expert copied a few times (3 matrices each, as the executor does).
  auto stream = dev.create_stream();
  double copy_best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    auto* dst = static_cast<uint8_t*>(slot);
    stream->copy_h2d(dst, host.gate, s.gate_bytes());
    stream->copy_h2d(dst + s.gate_bytes(), host.up, s.up_bytes());
    stream->copy_h2d(dst + s.gate_bytes() + s.up_bytes(), host.down, s.down_bytes());
    stream->synchronize();
    copy_best =
        std::min(copy_best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  HardwareRates r = rates_from_calibration(base, bytes, best_us, copy_best);
  if (dev.kind() == DeviceKind::sim) r.device_gbps = r.cpu_gbps;  // sim "kernels" are the CPU's
  return r;
}

HardwareRates rates_from_calibration(const HardwareRates& base, uint64_t expert_bytes,
                                     double cpu_best_us, double copy_best_us) {
  HardwareRates r = base;
  r.source = "calibrated";
  const auto bytes = static_cast<double>(expert_bytes);
  r.cpu_gbps = bytes / (std::max(cpu_best_us, 1e-3) * 1e3);
  // Split the measured time into latency (kept from base when plausible) and bandwidth.
  const double lat = std::min(base.copy_latency_us * 3, copy_best_us * 0.5);
  r.h2d_gbps = bytes / (std::max(copy_best_us - lat, 1e-3) * 1e3);
  r.copy_latency_us = lat / 3;
  return r;
}

}  // namespace ferry
