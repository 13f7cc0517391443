#pragma once
// The model and hardware flags `ferry plan` and `ferry simulate` share: a GGUF (-m) or a synthetic
// model described without writing it (--arch --preset --quant, runtime/synth's exact tensor
// table), the session (-c, -ctk, -ctv, -np, -b), and the hardware profiles (--profiles DIR,
// --gpu, --host; `--host this` measures this machine's memory bandwidth).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "offload/hardware_profile.hpp"
#include "offload/simulate_rates.hpp"
#include "runtime/plan/plan_model.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::cli {

struct PlanArgs {
  std::string model;  // -m
  std::string arch = "qwen35moe", preset = "35b-a3b", quant = "q4_k_m";
  int64_t ctx = 0;
  int32_t batch = 512;
  int32_t parallel = 1;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string profiles;  // --profiles DIR ("" = next to the binary, then ./profiles/hardware)
  std::string gpu, host;
};

void add_plan_args(CLI::App& app, PlanArgs& a, bool gpu_required);
// -ctk, -ctv and -np rewritten to their long forms (CLI11 takes one-letter short options only).
std::vector<std::string> normalize_plan_args(int argc, char** argv);
// parse() (common_args.hpp) over normalize_plan_args: plan's and simulate's command lines.
int parse_plan_command(CLI::App& app, int argc, char** argv, bool& stop);

// The model as a gguf::File: opened (-m), or described from synth's plan. `label` names it.
gguf::File open_plan_model(const PlanArgs& a);
PlanRequest plan_request(const PlanArgs& a);

std::string profiles_dir(const PlanArgs& a);
HardwareProfile simulator_params(const std::string& dir);
// The host profile: --host ID, "this" (measured now), or for a GPU without --host its plausible
// hosts (the profile's "hosts"; the band's ends).
std::vector<HardwareProfile> hosts_for(const std::string& dir, const HardwareProfile& gpu,
                                       const std::string& host);
// This machine: host read bandwidth measured with the bench probe (all physical cores), its core
// and thread counts and ISA; every figure labelled measured.
HardwareProfile measure_this_host();

}  // namespace ferry::cli
