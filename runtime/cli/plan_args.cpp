#include "runtime/cli/plan_args.hpp"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "runtime/cli/bench_membw.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/threads.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::cli {

void add_plan_args(CLI::App& app, PlanArgs& a, bool gpu_required) {
  app.add_option("-m,--model", a.model, "GGUF model file (instead of --arch --preset --quant)");
  app.add_option("--arch", a.arch, "synthetic model without a file: qwen3moe | qwen35moe | qwen3next")
      ->capture_default_str();
  app.add_option("--preset", a.preset, "tiny | small | 30b-a3b | 35b-a3b | 80b-a3b (as ferry synth)")
      ->capture_default_str();
  app.add_option("--quant", a.quant, "llama.cpp file type as ferry synth names it: " +
                                         synth::quant_mix_names())
      ->capture_default_str();
  app.add_option("-c,--ctx-size", a.ctx, "context size (0: min(model context, 4096), as ferry run)")
      ->capture_default_str();
  app.add_option("-b,--batch-size", a.batch, "tokens per forward step of a prompt")->capture_default_str();
  app.add_option("--parallel", a.parallel, "sequences sharing the context, each with its own recurrent state (-np)")
      ->capture_default_str();
  app.add_option("--cache-type-k", a.cache_type_k, "KV cache type for K (-ctk)")->capture_default_str();
  app.add_option("--cache-type-v", a.cache_type_v, "KV cache type for V (-ctv)")->capture_default_str();
  app.add_option("--profiles", a.profiles,
                 "hardware profile folder (gpu/, host/, simulator.json; default: profiles/hardware "
                 "next to the binary's checkout, then ./profiles/hardware)");
  auto* g = app.add_option("--gpu", a.gpu, "GPU profile id (profiles/hardware/gpu/ID.json)");
  if (gpu_required) g->required();
  app.add_option("--host", a.host,
                 "host profile id (profiles/hardware/host/ID.json), or `this` (measured here); "
                 "default: the GPU profile's plausible hosts, reported as a band");
}

std::vector<std::string> normalize_plan_args(int argc, char** argv) {
  std::vector<std::string> v = normalize_args(argc, argv);
  for (std::string& s : v)
    if (s == "-np") s = "--parallel";
  return v;
}

gguf::File open_plan_model(const PlanArgs& a) {
  if (!a.model.empty()) return gguf::File::open(a.model);
  synth::Options o;
  const auto arch = synth::arch_from_name(a.arch);
  if (!arch) fail(ErrorKind::invalid_arg, "unknown --arch '{}' (qwen3moe, qwen35moe, qwen3next)", a.arch);
  o.arch = *arch;
  const auto preset = synth::preset_from_name(o.arch, a.preset);
  if (!preset)
    fail(ErrorKind::invalid_arg, "unknown --preset '{}' for {} (tiny, small, {})", a.preset, a.arch,
         synth::preset_name(o.arch, synth::Preset::real));
  o.preset = *preset;
  const auto quant = synth::quant_mix_from_name(a.quant);
  if (!quant) fail(ErrorKind::invalid_arg, "unknown --quant '{}' (valid: {})", a.quant, synth::quant_mix_names());
  o.quant = *quant;
  const synth::ModelPlan plan = synth::make_plan(o);
  std::vector<gguf::File::TensorDecl> decls;
  decls.reserve(plan.tensors.size());
  for (const synth::TensorPlan& t : plan.tensors) decls.push_back({t.name, t.type, t.ne});
  return gguf::File::describe(fmt::format("synthetic {} {} {}", a.arch, a.preset, a.quant),
                              plan.metadata, decls);
}

PlanRequest plan_request(const PlanArgs& a) {
  PlanRequest r;
  r.n_ctx = a.ctx;
  r.n_batch = a.batch;
  r.n_parallel = a.parallel;
  r.type_k = parse_cache_type(a.cache_type_k, "-ctk");
  r.type_v = parse_cache_type(a.cache_type_v, "-ctv");
  return r;
}

std::string profiles_dir(const PlanArgs& a) {
  namespace fs = std::filesystem;
  if (!a.profiles.empty()) return a.profiles;
  std::error_code ec;
  // build/ferry → build/../profiles/hardware (the checkout the binary was built in).
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path p = exe.parent_path().parent_path() / "profiles" / "hardware";
    if (fs::is_directory(p / "gpu", ec)) return p.string();
  }
  if (fs::is_directory("profiles/hardware/gpu", ec)) return "profiles/hardware";
  fail(ErrorKind::io, "no hardware profiles found (profiles/hardware next to the binary's checkout "
                      "or in the current folder): pass --profiles DIR");
}

HardwareProfile simulator_params(const std::string& dir) {
  HardwareProfile p = load_hardware_profile(dir + "/simulator.json");
  if (p.kind != ProfileKind::simulator)
    fail(ErrorKind::format, "{}/simulator.json: kind \"{}\", expected \"simulator\"", dir,
         name_of(kProfileKinds, p.kind));
  return p;
}

std::vector<HardwareProfile> hosts_for(const std::string& dir, const HardwareProfile& gpu,
                                       const std::string& host) {
  if (host == "this") return {measure_this_host()};
  if (!host.empty()) return {find_hardware_profile(dir, ProfileKind::host, host)};
  if (gpu.hosts.empty())
    fail(ErrorKind::invalid_arg, "GPU profile {} names no plausible hosts: pass --host", gpu.id);
  std::vector<HardwareProfile> out;
  for (const std::string& h : gpu.hosts) out.push_back(find_hardware_profile(dir, ProfileKind::host, h));
  return out;
}

HardwareProfile measure_this_host() {
  HardwareProfile h;
  h.kind = ProfileKind::host;
  h.id = "this";
  h.name = "this machine (measured now)";
  const int cores = physical_cores();
  double gbps = 0;
  {
    ThreadLimit limit(cores);
    gbps = measure_host_read_gbps();
  }
  const std::string src = "measured now: ferry's host read probe (runtime/cli/bench_membw.hpp)";
  h.figures["dram_bandwidth_gbps"] = {gbps, "", false, FigureLabel::measured, src + ", all physical cores"};
  h.figures["cores"] = {double(cores), "", false, FigureLabel::measured, "sysfs (distinct package, core pairs)"};
  h.figures["threads"] = {double(std::thread::hardware_concurrency()), "", false, FigureLabel::measured,
                          "std::thread::hardware_concurrency"};
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2");
#else
  const bool avx512 = false, avx2 = false;
#endif
  h.figures["isa"] = {0, avx512 ? "avx512" : avx2 ? "avx2" : "scalar", true, FigureLabel::measured, "cpuid"};
  h.figures["ram_bytes"] = {double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)), "", false,
                            FigureLabel::measured, "sysconf"};
  return h;
}

int parse_plan_command(CLI::App& app, int argc, char** argv, bool& stop) {
  std::vector<std::string> args = normalize_plan_args(argc, argv);
  std::vector<char*> av;
  for (std::string& s : args) av.push_back(s.data());
  return parse(app, static_cast<int>(av.size()), av.data(), stop);
}

}  // namespace ferry::cli
