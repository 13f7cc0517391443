#pragma once
// The HTTP errors of `ferry serve`, in llama-server's envelope
//   {"error": {"code": 400, "message": "...", "type": "invalid_request_error", ...extra}}
// A request handler throws ApiError; the route wrapper turns it into the response. Messages name
// the request field involved ("messages[1].role: ...") so a client can fix its request.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace ferry::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message,
           nlohmann::json extra = nlohmann::json::object())
      : std::runtime_error(std::move(message)),
        status_(status),
        type_(std::move(type)),
        extra_(std::move(extra)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const nlohmann::json& extra() const { return extra_; }
  nlohmann::json body() const;  // the envelope

 private:
  int status_;
  std::string type_;
  nlohmann::json extra_;
};

// The envelope for a status with a message; the type follows llama-server's names for the code.
nlohmann::json error_body(int status, const std::string& message);
const char* error_type_for(int status);

// 400 invalid_request_error whose message starts with the field's name.
template <typename... Args>
[[noreturn]] void bad_field(const std::string& field, fmt::format_string<Args...> f,
                            Args&&... args) {
  throw ApiError(400, "invalid_request_error",
                 field + ": " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ferry::server
