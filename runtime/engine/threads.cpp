#include "runtime/engine/threads.hpp"

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <tbb/global_control.h>

namespace ferry {

int physical_cores() {
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0;; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(dir + "core_id"), pkg(dir + "physical_package_id");
    int c = 0, p = 0;
    if (!(core >> c)) break;
    if (!(pkg >> p)) p = 0;
    cores.emplace(p, c);
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

ThreadLimit::ThreadLimit(int n_threads) : n_(n_threads > 0 ? n_threads : physical_cores()) {
  gc_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                              static_cast<size_t>(n_));
}

ThreadLimit::~ThreadLimit() = default;

}  // namespace ferry
