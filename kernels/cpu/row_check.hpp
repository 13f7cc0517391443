#pragma once
// Argument checks shared by the CPU kernel entry points (not used inside the hot loops).
#include <cstdint>

#include "runtime/core/error.hpp"
#include "runtime/core/types.hpp"

namespace ferry::cpu {

// Number of blocks in a row of n values of type t; fails when t has no CPU kernel or n is not a
// multiple of its block size. `what` names the caller in the message.
inline int64_t check_row(GgmlType t, int64_t n, const char* what) {
  const TypeInfo& ti = type_info(t);
  if (!ti.compute) fail(ErrorKind::unsupported, "{}: no CPU kernel for type {}", what, ti.name);
  if (n < 0 || n % ti.block_values != 0)
    fail(ErrorKind::invalid_arg, "{}: row length {} is not a multiple of the {} block size {}",
         what, n, ti.name, ti.block_values);
  return n / ti.block_values;
}

}  // namespace ferry::cpu
