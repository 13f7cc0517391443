#pragma once
// Enumerations with names: one table per enum gives its spellings for parsing (the CLI's flags,
// profile files), for printing, and for the lists in error messages, so that no code below the CLI
// compares option strings.
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/core/error.hpp"

namespace ferry {

template <class E>
struct Named {
  const char* name;
  E value;
};

template <class E, size_t N>
std::optional<E> find_named(const std::array<Named<E>, N>& table, std::string_view s) {
  for (const Named<E>& n : table)
    if (s == n.name) return n.value;
  return std::nullopt;
}

template <class E, size_t N>
const char* name_of(const std::array<Named<E>, N>& table, E v) {
  for (const Named<E>& n : table)
    if (n.value == v) return n.name;
  return "?";
}

// "a, b or c"
template <class E, size_t N>
std::string names_list(const std::array<Named<E>, N>& table) {
  std::string s;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) s += i + 1 == N ? " or " : ", ";
    s += table[i].name;
  }
  return s;
}

// ErrorKind::invalid_arg naming `what` (a flag or field) when `s` is not in the table.
template <class E, size_t N>
E parse_named(const std::array<Named<E>, N>& table, std::string_view s, std::string_view what) {
  if (const std::optional<E> v = find_named(table, s)) return *v;
  fail(ErrorKind::invalid_arg, "{} '{}': expected {}", what, s, names_list(table));
}

}  // namespace ferry
