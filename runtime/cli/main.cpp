// `ferry` entry point: dispatches to the registered subcommands. The only place that exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "kernels/cpu/matmul.hpp"
#include "runtime/backend/cpu_ops_math.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/core/error.hpp"

namespace ferry::cli {

std::vector<Command>& commands() {
  static std::vector<Command> cmds;
  return cmds;
}

bool register_command(std::string name, std::string summary, CommandFn fn) {
  commands().push_back({std::move(name), std::move(summary), std::move(fn)});
  return true;
}

}  // namespace ferry::cli

namespace {

void usage(std::FILE* out) {
  auto cmds = ferry::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::fprintf(out,
               "ferry — run Mixture-of-Experts GGUF models on GPUs too small to hold them\n\n"
               "usage: ferry <command> [options]   (ferry <command> --help for its options)\n\n"
               "commands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
}

// The two process-wide numerics switches of the CPU path, read here and nowhere below (kernels/
// take no environment; docs/options.md says why they are variables rather than flags): FERRY_ISA
// caps the kernels' instruction set, FERRY_EXP_FORM picks ggml's exp rounding to match.
void apply_numerics_env() {
  if (const char* v = std::getenv("FERRY_ISA"); v && *v) {
    const auto isa = ferry::cpu::isa_from_name(v);
    if (!isa)
      ferry::fail(ferry::ErrorKind::invalid_arg,
                  "FERRY_ISA={}: expected scalar, avx2, avx512 or avx512vnni", v);
    if (*isa < ferry::cpu::active_isa()) ferry::cpu::set_isa(*isa);
  }
  if (const char* v = std::getenv("FERRY_EXP_FORM"); v && *v) {
    const auto form = ferry::cpu_math::exp_form_from_name(v);
    if (!form)
      ferry::fail(ferry::ErrorKind::invalid_arg, "FERRY_EXP_FORM={}: expected avx512, avx2 or sse2",
                  v);
    ferry::cpu_math::request_exp_form(*form);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    apply_numerics_env();
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry: error: %s\n", e.what());
    return 2;
  }
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  for (const auto& c : ferry::cli::commands()) {
    if (c.name != name) continue;
    std::string prog = "ferry " + name;
    argv[1] = prog.data();
    try {
      return c.fn(argc - 1, argv + 1);
    } catch (const ferry::Error& e) {
      std::fprintf(stderr, "ferry %s: error: %s\n", name.c_str(), e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ferry %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "ferry: unknown command '%s'\n\n", name.c_str());
  usage(stderr);
  return 2;
}
