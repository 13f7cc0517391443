#pragma once
// The cost model: per cold expert, which is cheapest — waiting for its prefetch, computing it on
// the CPU from the host store, copying it into a slot now and computing it on the device, or (a
// decode miss, where the host store is mapped) the device kernels reading it in place over the link.
// Rates come from a start-up calibration (calibrate_rates) or a hardware profile
// (profiles/hardware/*.json); every estimate is in microseconds.
//
//   copy_us(b)      = latency + b / h2d                  (the link is shared: + what is queued)
//   device_us(b, n) = b / device_read · ceil(n / 4)       (weights re-read per 4-token tile, as
//   cpu_us(b, n)    = handoff + b / cpu · ceil(n / 4)      the CPU and GPU kernels both tile by 4)
//   mapped_us(b, n) = b / mapped · ceil(n / 4)            (+ what is queued on the link)
//
// Decode (n = 1) compares cpu_us with copy_us + device_us; a prefetch in flight costs only its
// remaining time. Prefill streams an expert when copy + device beats the CPU for its token group.
#include <cstdint>
#include <string>

namespace ferry {

class Device;
struct ExpertShape;
struct ExpertPtrs;

struct HardwareRates {
  double h2d_gbps = 13.0;         // pinned host → device
  double copy_latency_us = 10.0;  // per copy (launch + DMA setup)
  double device_gbps = 288.0;     // expert kernel weight read rate on the device
  double cpu_gbps = 20.0;         // CPU expert compute, bytes of weights per second (all threads)
  double cpu_handoff_us = 10.0;   // activations to the host and results back, per step
  // Expert kernels reading a mapped pinned host copy in place over the link; 0 (the default, and
  // a profile without "mapped_read_gbps"): not measured, never chosen.
  double mapped_gbps = 0.0;
  std::string source = "defaults";
};

enum class ColdChoice { wait_prefetch, cpu, copy_now, mapped };
const char* cold_choice_name(ColdChoice c);

class CostModel {
 public:
  explicit CostModel(HardwareRates r = {}) : r_(std::move(r)) {}
  const HardwareRates& rates() const { return r_; }
  double copy_us(uint64_t bytes) const;
  double device_us(uint64_t bytes, int64_t n_tokens) const;
  double cpu_us(uint64_t bytes, int64_t n_tokens) const;
  double mapped_us(uint64_t bytes, int64_t n_tokens) const;  // +inf without a mapped rate
  // remaining_prefetch_us < 0: no prefetch in flight. link_queue_us: copies already queued ahead.
  // mapped_ok: this expert can be read in place (ColdChoice::mapped is a candidate).
  ColdChoice choose(uint64_t bytes, int64_t n_tokens, double remaining_prefetch_us,
                    double link_queue_us, bool mapped_ok = false) const;

 private:
  HardwareRates r_;
};

// Reads profiles/hardware/*.json (h2d_pinned_gbps, vram_read_gbps, host_dram_read_gbps,
// kernel_launch_us, mapped_read_gbps); ErrorKind::io / format naming the file.
HardwareRates rates_from_profile(const std::string& path);
// Measures on this machine: one expert's CPU decode time (from `host`, the host store) and one
// expert's copy into `slot` through the device. The device rate is kept from `base` (the sim
// device computes with the CPU: there it is measured like the CPU rate).
HardwareRates calibrate_rates(Device& dev, const ExpertShape& s, const ExpertPtrs& host,
                              void* slot, const HardwareRates& base = {});
// The rates calibrate_rates derives from its two timings (µs of host wall time): the best
// one-expert CPU decode and the best copy of one expert in three transfers plus a synchronise.
// The copy is split into latency min(3 × base latency, half the time) spread over the three
// transfers and bandwidth for the rest, so copy_us(expert_bytes) is the timed copy less
// 2 × base.copy_latency_us whenever the copy takes at least 6 × base.copy_latency_us. The CPU
// hand-off stays base's (not timed). The offload simulator calls it with its own durations to
// decide as a calibrated run decides (offload/simulate_rates.cpp).
HardwareRates rates_from_calibration(const HardwareRates& base, uint64_t expert_bytes,
                                     double cpu_best_us, double copy_best_us);

}  // namespace ferry
