#include "offload/simulate_rates.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/core/named.hpp"

namespace ferry {
namespace {

// The kernel figures of the reference card, by type name as simulator.json spells them.
constexpr GgmlType kKernelTypes[] = {
    GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,
    GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

// simulator.json's llama.cpp decode-graph counts: this prefix, then the architecture.
constexpr std::string_view kLlamaNodesKey = "llamacpp_graph_nodes_per_layer.";

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

}  // namespace

double pcie_spec_gbps(int gen, int lanes) {
  double per_lane = 0;
  switch (gen) {
    case 3: per_lane = 0.985; break;
    case 4: per_lane = 1.969; break;
    case 5: per_lane = 3.938; break;
    default: fail(ErrorKind::invalid_arg, "PCIe generation {} (3, 4 or 5)", gen);
  }
  if (lanes < 1 || lanes > 16) fail(ErrorKind::invalid_arg, "PCIe lanes {} (1..16)", lanes);
  return per_lane * lanes;
}

double SimRates::kernel_us(GgmlType t, uint64_t bytes, bool llama) const {
  const auto& table = llama ? llama_kernel_gbps : ferry_kernel_gbps;
  const auto it = table.find(t);
  // Types without a kernel figure (F32 norms and small vectors) stream at the memory rate.
  const double gbps = it == table.end() ? mem_gbps : it->second;
  return static_cast<double>(bytes) / (gbps * 1e3);
}

double SimRates::llama_nodes(const std::string& arch) const {
  const auto it = llama_nodes_per_layer.find(arch);
  if (it == llama_nodes_per_layer.end())
    fail(ErrorKind::unsupported,
         "simulator: no llama.cpp decode-graph kernel count for architecture '{}' "
         "(profiles/hardware/simulator.json {}<arch>)", arch, kLlamaNodesKey);
  return it->second;
}

double SimRates::llama_split_us() const {
  return llama_split_copies * sync_us + llama_split_waits * std::max(0.0, sync_us - launch_us) +
         launch_us;
}

HardwareRates SimRates::cost_rates(GgmlType gate, GgmlType up, GgmlType down) const {
  HardwareRates h;
  // The cost model has one device rate: the expert's bytes over its three kernels' time.
  const double t_us = kernel_us(gate, 1000000) + kernel_us(up, 1000000) + kernel_us(down, 1000000);
  h.h2d_gbps = link_gbps;
  h.copy_latency_us = copy_latency_us;
  h.device_gbps = 3.0 * 1e6 / (t_us * 1e3);
  h.cpu_gbps = cpu_gbps;
  h.cpu_handoff_us = sync_us;
  h.mapped_gbps = 0.0;  // not modelled: never chosen (as a run whose profile has no mapped rate)
  h.source = "simulator: " + gpu + " + " + host;
  return h;
}

HardwareRates SimRates::calibrated_rates(GgmlType gate, GgmlType up, GgmlType down,
                                        uint64_t expert_bytes) const {
  const HardwareRates truth = cost_rates(gate, up, down);
  const auto bytes = static_cast<double>(expert_bytes);
  const double cpu_best_us = bytes / (cpu_gbps * 1e3);
  // The three copies start on the link after the first call's launch; the host's synchronise
  // returns sync − launch after the last lands (as a waited copy in offload/simulate.cpp).
  const double copy_best_us = launch_us + copy_latency_us + bytes / (link_gbps * 1e3) +
                              std::max(0.0, sync_us - launch_us);
  HardwareRates h = rates_from_calibration(HardwareRates{}, expert_bytes, cpu_best_us, copy_best_us);
  h.device_gbps = truth.device_gbps;
  h.mapped_gbps = 0.0;
  h.source = "simulated calibration: " + gpu + " + " + host;
  return h;
}

SimRates sim_rates(const HardwareProfile& gpu, const HardwareProfile& host,
                   const HardwareProfile& p) {
  if (gpu.kind != ProfileKind::gpu) fail(ErrorKind::invalid_arg, "{} is not a GPU profile", gpu.id);
  if (host.kind != ProfileKind::host) fail(ErrorKind::invalid_arg, "{} is not a host profile", host.id);
  if (p.kind != ProfileKind::simulator) fail(ErrorKind::invalid_arg, "{} is not the simulator's parameters", p.id);
  SimRates r;
  r.gpu = gpu.id;
  r.host = host.id;
  r.vram_bytes = static_cast<uint64_t>(gpu.number("vram_bytes"));
  const double ref_sm_ghz = p.number("ref_sm_count") * p.number("ref_boost_clock_mhz") / 1e3;
  const double sm_ghz = gpu.number("sm_count") * gpu.number("boost_clock_mhz") / 1e3;
  const double compute_scale = sm_ghz / ref_sm_ghz;
  // A measured copy bandwidth (the reference card's own) is used as is; a spec one is scaled by
  // the fraction the reference card reached.
  const double copy_fraction = p.number("ref_copy_bandwidth_gbps") / p.number("ref_mem_bandwidth_gbps");
  r.mem_gbps = gpu.has("copy_bandwidth_gbps") ? gpu.number("copy_bandwidth_gbps")
                                               : gpu.number("mem_bandwidth_gbps") * copy_fraction;
  for (GgmlType t : kKernelTypes) {
    const std::string name = lower(type_name(t));
    r.ferry_kernel_gbps[t] = std::min(r.mem_gbps, p.number("matvec_gbps." + name) * compute_scale);
    r.llama_kernel_gbps[t] = std::min(r.mem_gbps, p.number("mmvq_gbps." + name) * compute_scale);
  }
  const double link_fraction =
      p.number("ref_h2d_gbps") / pcie_spec_gbps(static_cast<int>(p.number("ref_pcie_gen")),
                                                static_cast<int>(p.number("ref_pcie_lanes")));
  r.link_gbps = gpu.has("h2d_pinned_gbps")
                    ? gpu.number("h2d_pinned_gbps")
                    : pcie_spec_gbps(static_cast<int>(gpu.number("pcie_gen")),
                                     static_cast<int>(gpu.number("pcie_lanes"))) *
                          link_fraction;
  r.launch_us = gpu.number_or("kernel_launch_us", p.number("kernel_launch_us"));
  r.sync_us = gpu.number_or("sync_roundtrip_us", p.number("sync_roundtrip_us"));
  // As rates_from_profile (cost_model.cpp): a copy costs about two launches of latency.
  r.copy_latency_us = 2.0 * r.launch_us;
  r.launches_per_layer = p.number("launches_per_layer");
  if (host.has("offload_decode_cold")) {
    const ColdMode c = parse_named(kColdModes, host.text("offload_decode_cold"), "offload_decode_cold");
    if (c != ColdMode::cpu && c != ColdMode::copy)
      fail(ErrorKind::format, "host profile {}: offload_decode_cold must be cpu or copy", host.id);
    r.measured_decode_cold = c;
  }
  r.kernel_floor_us = p.number("kernel_floor_us");
  r.scan_lrfu_ns_per_slot = p.number("cache_scan_ns_per_slot.lrfu");
  r.scan_lru_ns_per_slot = p.number("cache_scan_ns_per_slot.lru");
  const HardwareFigure& dram = host.figure("dram_bandwidth_gbps");
  const double stream =
      dram.label == FigureLabel::measured ? dram.value : dram.value * p.number("dram_stream_fraction_of_spec");
  r.host_threads = static_cast<int32_t>(host.number("threads"));
  const double cores = host.number("cores");
  const double per_thread = p.number("cpu_thread_gbps");
  r.cpu_gbps = std::min(stream * p.number("cpu_expert_fraction_of_stream"), cores * per_thread);
  r.llama_cpu_gbps =
      std::min(stream * p.number("llamacpp_cpu_fraction_of_stream"), cores * per_thread);
  // llama.cpp maps the model file (its default load mode; weights in host memory skip its pinned
  // host buffer when mapped: its llama_model_loader), so a prompt batch's expert uploads come from
  // pageable memory: the driver copies them into a pinned staging buffer on the calling thread,
  // pipelined with the DMA, so one host thread's rate bounds them below the pinned link.
  // The host's own measured one-thread read rate where its profile has one (model revision 9:
  // the GPU machines' hosts), else the parameter's desktop figure.
  r.llama_upload_gbps =
      std::min({r.link_gbps, host.number_or("thread_read_gbps", per_thread), stream});
  r.prefill_gflops = p.number("ref_prefill_gflops") * compute_scale;
  // llama.cpp's prefill kernels are not Ferry's: its own published rate on its reference card.
  r.llama_prefill_gflops = p.number("llamacpp_ref_prefill_gflops") * sm_ghz /
                           (p.number("llamacpp_ref_sm_count") * p.number("llamacpp_ref_boost_clock_mhz") / 1e3);
  r.llama_graph_node_us = p.number("llamacpp_graph_node_us");
  for (const auto& [key, fig] : p.figures)
    if (std::string_view(key).starts_with(kLlamaNodesKey))
      r.llama_nodes_per_layer[key.substr(kLlamaNodesKey.size())] = p.number(key);
  // The fixed part is latency, as the kernel floor: one wave of a few blocks per head, not scaled.
  r.attention_fixed_us = p.number("attention_decode_fixed_us");
  r.attention_mem_fraction = p.number("attention_decode_fraction_of_copy");
  r.llama_cpu_nodes = p.number("llamacpp_cpu_nodes_per_host_layer");
  r.llama_cpu_node_us = p.number("llamacpp_cpu_node_us");
  r.llama_split_copies = p.number("llamacpp_split_copies");
  r.llama_split_waits = p.number("llamacpp_split_waits");
  r.llama_cache_profile_tokens = static_cast<int64_t>(p.number("llamacpp_cache_profile_tokens"));
  r.llama_cache_merge_nodes = p.number("llamacpp_cache_merge_nodes");
  r.llama_ubatch = static_cast<int64_t>(p.number("llamacpp_ubatch"));
  r.llama_offload_min_batch = static_cast<int64_t>(p.number("llamacpp_offload_min_batch"));
  r.fit_margin_bytes = static_cast<uint64_t>(p.number("fit_target_mib")) << 20;
  r.fit_min_ctx = static_cast<int64_t>(p.number("fit_min_ctx"));
  if (!(r.mem_gbps > 0 && r.link_gbps > 0 && r.cpu_gbps > 0 && r.prefill_gflops > 0 &&
        r.llama_prefill_gflops > 0))
    fail(ErrorKind::format, "simulator rates for {} + {}: a rate is not positive", gpu.id, host.id);
  return r;
}

}  // namespace ferry
