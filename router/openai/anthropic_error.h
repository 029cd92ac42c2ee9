// Errors in Anthropic's shape, {"type": "error", "error": {"type", "message"}}, with the HTTP
// status Anthropic gives each type. Every error of the Messages routes goes through here: the
// request's own (a 400 naming the field), the chat route's and the router's (ApiError, as the
// OpenAI routes get them), authentication, and cpp-httplib's (413, 404).
//
//   400 invalid_request_error   401 authentication_error   403 permission_error
//   404 not_found_error         413 request_too_large      504 timeout_error
//   529 overloaded_error (the router's 503: RESOURCE_EXHAUSTED, UNAVAILABLE; the anthropic
//       client retries it)      other 5xx api_error (499, a server-side abort: api_error too)
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

struct AnthropicError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
};

// `error` (an OpenAI-shaped error of any route) as Anthropic's. The message keeps naming the
// field: a chat-route message that does not name its `param` gets it in front ("top_k: ...").
AnthropicError ToAnthropicError(const ApiError& error);

// {"type": "error", "error": {"type", "message"}}: the body, and an `error` event's data.
nlohmann::ordered_json AnthropicErrorBody(const AnthropicError& error);

}  // namespace mlaserve::router::openai
