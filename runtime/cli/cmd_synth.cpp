// `ferry synth`: writes a synthetic model with real tensor names, shapes and metadata (or, with
// --plan, prints its tensor table). See docs/synth.md.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/cli/command.hpp"
#include "runtime/core/error.hpp"
#include "runtime/synth/encode.hpp"
#include "runtime/synth/synth.hpp"

namespace {

using namespace ferry;

std::string shape_string(const std::vector<uint64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

void print_plan(const synth::ModelPlan& plan) {
  std::printf("%-36s %-22s %-5s %14s\n", "tensor", "shape (ne0 first)", "type", "bytes");
  for (const auto& t : plan.tensors)
    std::printf("%-36s %-22s %-5s %14llu\n", t.name.c_str(), shape_string(t.ne).c_str(),
                std::string(type_name(t.type)).c_str(), static_cast<unsigned long long>(t.n_bytes));
  std::printf("%zu tensors, %.3f GB of tensor data\n", plan.tensors.size(), plan.tensor_bytes() / 1e9);
}

std::string duration_string(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
}

int run_synth(int argc, char** argv) {
  CLI::App app{
      "Write a synthetic MoE model: real tensor names, shapes, types and metadata of the architecture,\n"
      "deterministic random weights (same bytes for the same options, whatever -t), a byte-level BPE\n"
      "vocabulary. Presets: tiny (tests), small (~1-2 GB, benches), 30b-a3b | 35b-a3b | 80b-a3b (real).",
      "ferry synth"};
  std::string arch_s = "qwen3moe", preset_s = "tiny", quant_s = "f32", out;
  synth::Options o;
  int threads = 0;
  bool plan_only = false, quiet = false;
  uint32_t layers = 0, experts = 0, experts_used = 0;
  app.add_option("--arch", arch_s, "qwen3moe | qwen35moe | qwen3next")->capture_default_str();
  app.add_option("--preset", preset_s, "tiny | small | 30b-a3b (qwen3moe) | 35b-a3b (qwen35moe) | 80b-a3b (qwen3next)")
      ->capture_default_str();
  app.add_option("--quant", quant_s,
                 "llama.cpp file type (llama-quantize's per-tensor types): " + synth::quant_mix_names() +
                     ". q2_k and q3_k_* write random valid Q2_K/Q3_K blocks (no quantizer yet)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--router-skew", o.router_skew,
                 "Zipf exponent of expert popularity per layer (0 = near uniform)")
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "worker threads (0 = all cores)")->capture_default_str();
  app.add_option("-o,--output", out, "output GGUF path");
  app.add_option("--layers", layers, "override the preset's layer count");
  app.add_option("--experts", experts, "override the preset's expert count");
  app.add_option("--expert-used", experts_used, "override the experts used per token");
  app.add_option(
      "--expert-types", o.expert_types,
      "routed expert types per layer over the --quant mix: RULE[,RULE...], RULE = "
      "[LAYERS:][gate_up=|down=]TYPE, LAYERS = N | N-M | * (omitted: the previous rule's "
      "layers, all for the first), TYPE = " + synth::writable_type_names() + "; later rules "
      "win; gate and up share a type. E.g. 0-4:q6_k,5-9:q5_k,10-29:iq4_xs,30-39:q6_k or "
      "gate_up=q4_k,down=q5_k");
  app.add_flag("--plan", plan_only, "print the tensor table and size instead of writing");
  app.add_flag("-q,--quiet", quiet, "no progress output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const auto arch = synth::arch_from_name(arch_s);
  if (!arch) fail(ErrorKind::invalid_arg, "unknown --arch '{}' (qwen3moe, qwen35moe, qwen3next)", arch_s);
  o.arch = *arch;
  const auto preset = synth::preset_from_name(o.arch, preset_s);
  if (!preset)
    fail(ErrorKind::invalid_arg, "unknown --preset '{}' for {} (tiny, small, {})", preset_s, arch_s,
         synth::preset_name(o.arch, synth::Preset::real));
  o.preset = *preset;
  const auto quant = synth::quant_mix_from_name(quant_s);
  if (!quant) fail(ErrorKind::invalid_arg, "unknown --quant '{}' (valid: {})", quant_s, synth::quant_mix_names());
  o.quant = *quant;
  if (layers) o.n_layer = layers;
  if (experts) o.n_expert = experts;
  if (experts_used) o.n_expert_used = experts_used;

  const synth::ModelPlan plan = synth::make_plan(o);
  if (plan_only) {
    print_plan(plan);
    return 0;
  }
  if (out.empty()) fail(ErrorKind::invalid_arg, "-o FILE is required (or --plan)");

  synth::WriteOptions w;
  w.threads = threads;
  const bool tty = isatty(STDERR_FILENO);
  double last_line = -10.0;
  if (!quiet) {
    w.progress = [&](uint64_t done, uint64_t total, double s) {
      const bool end = done == total;
      if (!tty && !end && s - last_line < 10.0) return;  // logs: a line every 10 s
      last_line = s;
      const double mbps = s > 0 ? done / 1e6 / s : 0.0;
      const double eta = mbps > 0 ? (total - done) / 1e6 / mbps : 0.0;
      std::fprintf(stderr, "%ssynth: %.2f / %.2f GB (%.0f%%)  %.1f MB/s  %s %s%s", tty ? "\r" : "",
                   done / 1e9, total / 1e9, total ? 100.0 * done / total : 100.0, mbps,
                   end ? "in" : "eta", duration_string(end ? s : eta).c_str(), tty && !end ? "   " : "\n");
    };
  }
  const synth::WriteStats st = synth::write_model(plan, out, w);
  if (!quiet)
    std::fprintf(stderr, "wrote %s: %zu tensors, %.3f GB in %.1f s (%.1f MB/s)\n", out.c_str(),
                 plan.tensors.size(), st.file_bytes / 1e9, st.seconds,
                 st.seconds > 0 ? st.file_bytes / 1e6 / st.seconds : 0.0);
  return 0;
}

FERRY_COMMAND("synth", "write a synthetic MoE model (real shapes, random weights)", run_synth);

}  // namespace
