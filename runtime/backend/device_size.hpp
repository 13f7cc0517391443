#pragma once
// Human sizes for budgets and flags: "16G", "512M", "1.5G", "64k", "4096", "2GiB", "100MB".
// Suffixes are binary (K = 1024, M = 1024², G = 1024³, T = 1024⁴), case-insensitive, with an
// optional "B", "iB"; no suffix = bytes. Anything else (empty, negative, junk, overflow) throws
// ErrorKind::invalid_arg with the offending text.
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

uint64_t parse_size(std::string_view text);
// "1.50 GiB", "512.00 MiB", "17 B".
std::string format_size(uint64_t bytes);

}  // namespace ferry
