#pragma once
// Subcommand registry: each cmd_*.cpp registers itself with a static FERRY_COMMAND(...).
// A command returns the process exit code; library errors (ferry::Error) propagate to main,
// which prints them as one line and exits non-zero.
#include <functional>
#include <string>
#include <vector>

namespace ferry::cli {

using CommandFn = std::function<int(int argc, char** argv)>;  // argv[0] = "ferry <name>"

struct Command {
  std::string name;
  std::string summary;
  CommandFn fn;
};

std::vector<Command>& commands();
bool register_command(std::string name, std::string summary, CommandFn fn);

}  // namespace ferry::cli

#define FERRY_CLI_CONCAT2(a, b) a##b
#define FERRY_CLI_CONCAT(a, b) FERRY_CLI_CONCAT2(a, b)
#define FERRY_COMMAND(name, summary, fn) \
  static const bool FERRY_CLI_CONCAT(ferry_cmd_reg_, __LINE__) = ::ferry::cli::register_command(name, summary, fn)
