#pragma once
// The one error a chat template raises. It is a ferry::Error (so callers that only know the
// project's scheme still get a kind and a message) that also says what went wrong and where:
//   syntax       the template does not parse (kind format)
//   unsupported  a construct this interpreter does not implement (kind unsupported); the message
//                reads "template line N: unsupported ..."
//   raised       the template called raise_exception(msg) (kind invalid_arg: the request is what
//                the template rejects); message() is the template's own text
//   runtime      what jinja2 would raise while rendering: an undefined attribute, a type error
//                (kind invalid_arg)
#include <string>

#include "runtime/core/error.hpp"

namespace ferry::chat {

enum class TemplateFailure { syntax, unsupported, raised, runtime };

class TemplateError : public ferry::Error {
 public:
  TemplateError(TemplateFailure failure, int line, const std::string& what)
      : ferry::Error(kind_of(failure),
                     line > 0 ? fmt::format("template line {}: {}", line, what) : what),
        failure_(failure),
        line_(line),
        detail_(what) {}
  TemplateFailure failure() const { return failure_; }
  int line() const { return line_; }  // 1-based line of the template source; 0 if unknown
  const std::string& detail() const { return detail_; }  // the message without the line prefix

 private:
  static ErrorKind kind_of(TemplateFailure f) {
    switch (f) {
      case TemplateFailure::syntax:
        return ErrorKind::format;
      case TemplateFailure::unsupported:
        return ErrorKind::unsupported;
      default:
        return ErrorKind::invalid_arg;
    }
  }
  TemplateFailure failure_;
  int line_;
  std::string detail_;
};

}  // namespace ferry::chat
