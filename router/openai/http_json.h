// JSON bodies and OpenAI-shaped errors on a cpp-httplib response, for every route of the
// OpenAI HTTP API (http_api.h, responses_api.h).
#pragma once

#include <httplib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

inline void SendJson(httplib::Response& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  // Strings that are not UTF-8 (none should be: detokenized text is whole characters) are
  // sent with U+FFFD rather than failing the response.
  res.set_content(body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

inline void SendError(httplib::Response& res, const ApiError& error) {
  SendJson(res, error.http_status, ErrorBody(error));
}

// What an error status cpp-httplib or the transport's bounds (common/bounded_http_server.h) set
// before any handler ran means, for the error body.
inline std::string TransportErrorMessage(const httplib::Request& req, int status) {
  switch (status) {
    case 404: return absl::StrCat("no route for ", req.method, " ", req.path);
    case 408: return "the request was not received in time (--http-read-timeout-s)";
    case 413: return "the request body is too large (--max-request-bytes)";
    case 414: return "the request line is too long";
    case 431: return "the request's headers are too large";
    default: return absl::StrCat("HTTP ", status);
  }
}

}  // namespace mlaserve::router::openai
