#pragma once
// The logger: the only global mutable state. Messages go to stderr; level from --verbose/-q.
#include <cstdio>

#include <fmt/format.h>

namespace ferry::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

void set_level(Level l);
Level level();
void write(Level l, const std::string& msg);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (level() >= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (level() >= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (level() >= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace ferry::log
