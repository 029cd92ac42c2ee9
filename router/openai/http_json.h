// JSON bodies and OpenAI-shaped errors on a cpp-httplib response, for every route of the
// OpenAI HTTP API (http_api.h, responses_api.h).
#pragma once

#include <httplib.h>

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

}  // namespace mlaserve::router::openai
