#include "runtime/core/log.hpp"

#include <atomic>
#include <mutex>

namespace ferry::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::info)};
std::mutex g_mutex;
}  // namespace

void set_level(Level l) { g_level.store(static_cast<int>(l)); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

void write(Level l, const std::string& msg) {
  static const char* prefix[] = {"error: ", "warning: ", "", "debug: "};
  std::lock_guard lock(g_mutex);
  std::fputs(prefix[static_cast<int>(l)], stderr);
  std::fputs(msg.c_str(), stderr);
  std::fputc('\n', stderr);
}

}  // namespace ferry::log
