#include "runtime/backend/device_size.hpp"

#include <cctype>
#include <cmath>
#include <string>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

}  // namespace

uint64_t parse_size(std::string_view text) {
  auto bad = [&](const char* why) -> uint64_t {
    fail(ErrorKind::invalid_arg, "invalid size '{}': {} (examples: 16G, 512M, 1.5G, 4096)", text, why);
  };
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  const std::string_view s = text.substr(b, e - b);
  if (s.empty()) return bad("empty");
  // Number part: digits with at most one '.', at least one digit.
  size_t i = 0;
  bool dot = false, digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c))) digit = true;
    else if (c == '.' && !dot) dot = true;
    else break;
  }
  if (!digit) return bad("no number");
  const std::string number(s.substr(0, i));
  std::string suffix = lower(s.substr(i));
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(suffix.begin());
  uint64_t mult = 1;
  if (!suffix.empty()) {
    const char u = suffix[0];
    std::string rest = suffix.substr(1);
    switch (u) {
      case 'b': mult = 1; rest = suffix.substr(1); if (!rest.empty()) return bad("unknown suffix"); break;
      case 'k': mult = 1ull << 10; break;
      case 'm': mult = 1ull << 20; break;
      case 'g': mult = 1ull << 30; break;
      case 't': mult = 1ull << 40; break;
      default: return bad("unknown suffix");
    }
    if (u != 'b' && !(rest.empty() || rest == "b" || rest == "ib")) return bad("unknown suffix");
  }
  if (!dot) {
    uint64_t v = 0;
    for (char c : number) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) return bad("too large");
      v = v * 10 + d;
    }
    if (v != 0 && mult > UINT64_MAX / v) return bad("too large");
    return v * mult;
  }
  const long double v = std::stold(number) * static_cast<long double>(mult);
  if (!(v < 18446744073709551615.0L)) return bad("too large");
  if (mult == 1 && v != std::floor(v)) return bad("fractional bytes");
  return static_cast<uint64_t>(std::llround(v));
}

std::string format_size(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, kUnits[u]);
}

}  // namespace ferry
