// RequestReader: the fields of an OpenAI-style JSON request body, read with OpenAI-shaped
// errors (400 invalid_request_error naming the parameter: "'n' must be an integer, got a
// string"). Every endpoint's parser reads with it (api_request.h for completions and chat,
// tokenize_request.h for /tokenize and /detokenize), so their errors read alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

// The body as a JSON object, or the 400 saying it is not one.
std::variant<nlohmann::ordered_json, ApiError> ParseRequestBody(const std::string& body);

// A 400 invalid_request_error with `message`, naming `param` when given.
ApiError Invalid(std::string message, std::optional<std::string> param = std::nullopt);

// "a string", "an array", ... as the errors name a JSON value's type.
std::string JsonType(const nlohmann::ordered_json& v);

// Whether `object[key]` is the string `want` (false for another type: nlohmann's value() would
// throw on a non-string).
bool StringFieldIs(const nlohmann::ordered_json& object, const char* key, std::string_view want);

// Reads fields of one body; the first error wins and stops reading (every later read returns
// nullopt). The body must outlive the reader.
class RequestReader {
 public:
  explicit RequestReader(const nlohmann::ordered_json& body) : body_(body) {}

  const std::optional<ApiError>& error() const { return error_; }
  bool failed() const { return error_.has_value(); }
  void Fail(ApiError e) {
    if (!error_) error_ = std::move(e);
  }

  // The field, or nullptr when absent or null (OpenAI treats null as "not given").
  const nlohmann::ordered_json* Get(const std::string& key) const;
  void WrongType(const std::string& key, const std::string& want, const nlohmann::ordered_json& got);
  std::optional<bool> Bool(const std::string& key);
  std::optional<double> Number(const std::string& key);
  std::optional<int64_t> Integer(const std::string& key);
  std::optional<std::string> String(const std::string& key);
  // A 32-bit integer in [lo, hi] (token counts, ids).
  std::optional<int32_t> Int32(const std::string& key, int64_t lo, int64_t hi);

 private:
  const nlohmann::ordered_json& body_;
  std::optional<ApiError> error_;
};

}  // namespace mlaserve::router::openai
