#include "runtime/core/error.hpp"

namespace ferry {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::io: return "io";
    case ErrorKind::format: return "format";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::invalid_arg: return "invalid argument";
    case ErrorKind::budget: return "budget";
    case ErrorKind::context: return "context";
    case ErrorKind::device: return "device";
    case ErrorKind::internal: return "internal";
  }
  return "unknown";
}

}  // namespace ferry
