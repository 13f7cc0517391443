#pragma once
// Durations for the offload simulator, derived from a GPU profile, a host profile and the
// simulator's parameters (profiles/hardware/simulator.json); docs/simulator.md gives every
// formula and where each parameter comes from. All rates in GB/s (1e9 bytes/s), times in µs.
//
//   memory (achievable)   = the card's spec bandwidth × (H200 copy / H200 spec)
//   kernel rate of type T = min(memory, H200 kernel rate of T × (SMs × clock) / (H200 SMs × clock))
//                           (Ferry's float kernels; llama.cpp's: the dp4a kernels, its MMVQ idea)
//   link                  = PCIe spec (gen, lanes) × (H200 measured H2D / PCIe 5.0 x16 spec)
//   host stream           = measured host bandwidth, or spec × stream fraction (assumed)
//   CPU experts           = min(host stream × CPU kernel fraction, threads × per-thread rate)
//   llama.cpp's uploads   = min(link, one thread's rate, host stream): pageable memory, staged
//                           (one thread's rate: the host's measured one, else the parameter)
//   llama.cpp's decode    = its graph's kernels per layer (by architecture) × per-node cost
//                           + weights at its kernels' rates; a host-expert layer adds its experts
//                           at the CPU rate, its CPU nodes × their cost and its splits' copies,
//                           waits and graph launch (split_us)
//   attention (Ferry)     = max(kernel floor, fixed time + K,V bytes / (memory × fraction))
//   prefill compute       = H200 prefill FLOP rate × (SMs × clock) / (H200 SMs × clock); llama.cpp's:
//                           its published prefill rate × (SMs × clock) / (that card's SMs × clock)
//   cache victim scan     = slots of the size class × ns per slot (by policy; one host core)
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "offload/cost_model.hpp"
#include "offload/hardware_profile.hpp"
#include "offload/offload.hpp"
#include "runtime/core/types.hpp"

namespace ferry {

struct SimRates {
  std::string gpu, host;  // profile ids
  uint64_t vram_bytes = 0;
  double mem_gbps = 0;     // achievable device memory bandwidth
  double link_gbps = 0;    // host → device, pinned
  double copy_latency_us = 0;
  double launch_us = 0;    // one kernel launch (host side)
  double sync_us = 0;      // launch + synchronize round trip (a host-routed MoE step's routing)
  double launches_per_layer = 0;
  double kernel_floor_us = 0;  // the shortest a kernel takes on the GPU (Ferry's eager launches)
  // What the engine did with its decode misses on this host when it was measured there (the host
  // profile's "offload_decode_cold", cpu or copy; model revision 12): --stats' copy waits say
  // which, where the start-up calibration that decides it was not printed. Empty: the simulated
  // engine decides with the calibration it would derive on the simulated hardware.
  std::optional<ColdMode> measured_decode_cold;
  // Host time per slot the expert cache's victim choice scans (ExpertCache::insert: every slot of
  // the layer's size class), by eviction policy (model revision 8).
  double scan_lrfu_ns_per_slot = 0, scan_lru_ns_per_slot = 0;
  double cpu_gbps = 0;        // Ferry's CPU experts, all threads
  double llama_cpu_gbps = 0;  // llama.cpp's CPU experts, all threads
  // llama.cpp's uploads of host experts for a prompt batch: its weights are mmapped (pageable),
  // so the driver stages them through a pinned buffer with one host thread's copy (model revision 7)
  double llama_upload_gbps = 0;
  double prefill_gflops = 0;  // GPU prefill, FLOP/s / 1e9 (Ferry's kernels)
  double llama_prefill_gflops = 0;  // llama.cpp's GPU prefill (its own published reference)
  double llama_graph_node_us = 0;  // llama.cpp: per kernel inside its CUDA graph
  // llama.cpp's kernels per layer in its one-token decode graph, by architecture (model revision
  // 9: counted in llama.cpp's own graph, bench/llamacpp_graph_nodes.py).
  std::map<std::string, double, std::less<>> llama_nodes_per_layer;
  // Ferry's attention decode kernel (model revision 9): a fixed time (as measured, like the kernel
  // floor) plus K and V bytes at a measured share of the memory rate.
  double attention_fixed_us = 0, attention_mem_fraction = 0;
  // llama.cpp's decode of a layer whose experts are in host memory (model revision 10, counted in
  // its scheduler, ggml_backend_sched_compute_splits): the CPU split's nodes (its mul_mat_ids and
  // the GLU between them) at a per-node CPU cost; the tensors copied across the two split
  // boundaries, each a synchronous copy (a sync round trip); the synchronisations of the source
  // stream before each device→host copy (each a synchronise's return); and one graph launch for
  // the GPU split after it.
  double llama_cpu_nodes = 0, llama_cpu_node_us = 0;
  double llama_split_copies = 0, llama_split_waits = 0;
  // The static expert cache of thecodacus/llama.cpp#5 (model revision 11): the tokens of the routing
  // profile its hot set is chosen from, and the GPU nodes its layer adds to merge the cached
  // experts' sum with the CPU's.
  int64_t llama_cache_profile_tokens = 512;
  double llama_cache_merge_nodes = 0;
  int64_t llama_ubatch = 512;
  int64_t llama_offload_min_batch = 32;
  uint64_t fit_margin_bytes = 0;   // llama.cpp -fitt default (also Ferry's default margin)
  int64_t fit_min_ctx = 4096;      // llama.cpp -fitc default
  int32_t host_threads = 0;
  std::map<GgmlType, double> ferry_kernel_gbps, llama_kernel_gbps;  // one-token matvec, by type

  // One-token kernel time of `bytes` of type t (Ferry's kernels, or llama.cpp's).
  double kernel_us(GgmlType t, uint64_t bytes, bool llama = false) const;
  // llama.cpp's decode kernels per layer for this architecture; ErrorKind::unsupported naming it
  // when simulator.json has no count for it.
  double llama_nodes(const std::string& arch) const;
  // Host time of the graph splits around one host-expert layer's CPU part (model revision 10):
  // the copies (sync round trips), the waits (a synchronise's return each), the next GPU split's
  // graph launch. The CPU nodes' own time is not in it.
  double llama_split_us() const;
  // The cost model's rates on this hardware for experts of this shape (the same fields a
  // profiles/hardware file gives a real run through --hw-profile).
  HardwareRates cost_rates(GgmlType gate, GgmlType up, GgmlType down) const;
  // The rates a run without --hw-profile decides with: its start-up calibration
  // (OffloadExecutor::calibrate → calibrate_rates) applied to this hardware's durations, i.e.
  // rates_from_calibration of the simulated one-expert CPU decode and three-transfer copy (host
  // wall time: the copy on the link, then the synchronise's return), the engine's default base,
  // and the kernels' device rate (the executor times its kernels). Durations stay cost_rates'.
  HardwareRates calibrated_rates(GgmlType gate, GgmlType up, GgmlType down,
                                 uint64_t expert_bytes) const;
};

// PCIe bandwidth per direction from the specification (GB/s): gen 3 0.985, 4 1.969, 5 3.938 per
// lane (128b/130b encoding). ErrorKind::invalid_arg for another generation.
double pcie_spec_gbps(int gen, int lanes);

// ErrorKind::format naming the file and the parameter when one is missing.
SimRates sim_rates(const HardwareProfile& gpu, const HardwareProfile& host,
                   const HardwareProfile& params);

}  // namespace ferry
