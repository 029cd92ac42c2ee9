#include "router/openai/anthropic_error.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::router::openai {

// Anthropic's overloaded status: what the router's 503s (queue full, no worker) become.
constexpr int kOverloadedStatus = 529;

AnthropicError ToAnthropicError(const ApiError& error) {
  AnthropicError out;
  out.message = error.message;
  if (error.param.has_value() && !error.param->empty() && !absl::StrContains(error.message, *error.param)) {
    out.message = absl::StrCat(*error.param, ": ", error.message);
  }
  out.http_status = error.http_status;
  switch (error.http_status) {
    case 400: out.type = "invalid_request_error"; break;
    case 401: out.type = "authentication_error"; break;
    case 403: out.type = "permission_error"; break;
    case 404: out.type = "not_found_error"; break;
    case 409: out.type = "conflict_error"; break;
    case 413: out.type = "request_too_large"; break;
    case 429: out.type = "rate_limit_error"; break;
    case 503:
      out.http_status = kOverloadedStatus;
      out.type = "overloaded_error";
      break;
    case 504: out.type = "timeout_error"; break;
    default: out.type = error.http_status < 500 && error.http_status != 499 ? "invalid_request_error" : "api_error";
  }
  return out;
}

nlohmann::ordered_json AnthropicErrorBody(const AnthropicError& error) {
  return nlohmann::ordered_json{{"type", "error"}, {"error", {{"type", error.type}, {"message", error.message}}}};
}

}  // namespace mlaserve::router::openai
