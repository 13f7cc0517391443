#include "runtime/cli/backend_args.hpp"

#include "runtime/core/error.hpp"

namespace ferry::cli {

void add_backend_args(CLI::App& app, BackendArgs& a) {
  app.add_option(
         "--cuda-graphs", a.cuda_graphs,
         "cuda: one-token steps as CUDA graphs: off (kernel by kernel; measured faster on an H200), on, "
         "segments (also the offloaded steps, recorded around their MoE steps); "
         "bench/results/2026-12-04-gpu-check-h200*.md")
      ->check(CLI::IsMember({"on", "off", "segments"}))
      ->capture_default_str();
  app.add_flag(
      "--cuda-int8-dot", a.cuda_int8_dot,
      "cuda: integer dp4a matvec for one-token quantized matmuls (every type but F32/F16/BF16; "
      "activations rounded to 8 bits); no faster end to end on an H200, where decode is launch-bound");
  app.add_option(
         "--gdn-prefill", a.gdn_prefill,
         "Gated DeltaNet delta rule for prompt batches of 16+ tokens: auto (cpu: recurrent, "
         "bit-identical to llama.cpp; cuda: recurrent, measured faster than chunked on an H200), "
         "chunked, recurrent")
      ->check(CLI::IsMember({"auto", "chunked", "recurrent"}))
      ->capture_default_str();
  app.add_flag("--no-repack", a.no_repack,
               "cpu: keep Q4_0/IQ4_NL/MXFP4 matrices in the file's layout instead of repacking them "
               "at load (same results; slower kernels, no copy in RAM)");
}

void apply_backend_args(const BackendArgs& a, BackendOptions& b) {
  if (a.cuda_graphs != "on" && a.cuda_graphs != "off" && a.cuda_graphs != "segments")
    fail(ErrorKind::invalid_arg, "--cuda-graphs {}: expected on, off or segments", a.cuda_graphs);
  b.cuda.graphs = a.cuda_graphs != "off";
  b.cuda.graph_segments = a.cuda_graphs == "segments";
  b.cuda.int8_dot = a.cuda_int8_dot;
  b.cpu.repack = !a.no_repack;
  if (a.gdn_prefill == "chunked" || a.gdn_prefill == "recurrent") {
    const cpu::GdnPrefill f =
        a.gdn_prefill == "chunked" ? cpu::GdnPrefill::chunked : cpu::GdnPrefill::recurrent;
    b.cpu.gdn_prefill = f;
    b.cuda.gdn_prefill = f;
  } else if (a.gdn_prefill != "auto") {
    fail(ErrorKind::invalid_arg, "--gdn-prefill {}: expected auto, chunked or recurrent",
         a.gdn_prefill);
  }
}

}  // namespace ferry::cli
