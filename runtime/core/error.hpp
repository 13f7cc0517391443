#pragma once
// One error scheme for the whole library: throw ferry::Error with a kind and a message that names
// the file, tensor, layer or request involved. Only main() decides to exit.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace ferry {

enum class ErrorKind {
  io,           // open/read/write/mmap failed
  format,       // malformed or hostile file contents
  unsupported,  // valid input Ferry does not handle (architecture, quant type)
  invalid_arg,  // bad flag or API argument
  budget,       // memory budget exceeded / too small
  context,      // context window full
  device,       // CUDA / device failure
  internal,
};

const char* error_kind_name(ErrorKind k);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string msg) : std::runtime_error(std::move(msg)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ferry
