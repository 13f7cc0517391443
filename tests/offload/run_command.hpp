#pragma once
// Runs a shell command for the CLI tests: its exit status, and stdout and stderr together.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace ferry::test {

inline int run_command(const std::string& cmd, std::string& out) {
  out.clear();
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace ferry::test
