#include "runtime/server/api_error.hpp"

namespace ferry::server {

const char* error_type_for(int status) {
  switch (status) {
    case 400:
    case 413:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 501:
      return "not_supported_error";
    case 503:
      return "unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"code", status_}, {"message", what()}, {"type", type_}};
  for (const auto& [k, v] : extra_.items()) e[k] = v;
  return {{"error", e}};
}

nlohmann::json error_body(int status, const std::string& message) {
  return ApiError(status, error_type_for(status), message).body();
}

}  // namespace ferry::server
