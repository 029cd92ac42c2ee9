#include "router/openai/request_reader.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace mlaserve::router::openai {

using Json = nlohmann::ordered_json;

ApiError Invalid(std::string message, std::optional<std::string> param) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::nullopt};
}

std::variant<Json, ApiError> ParseRequestBody(const std::string& body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid("the request body is not valid JSON");
  if (!j.is_object()) return Invalid(absl::StrCat("the request body must be a JSON object, got ", JsonType(j)));
  return j;
}

std::string JsonType(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    default: return "an object";
  }
}

bool StringFieldIs(const Json& object, const char* key, std::string_view want) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

const Json* RequestReader::Get(const std::string& key) const {
  auto it = body_.find(key);
  return it == body_.end() || it->is_null() ? nullptr : &*it;
}

void RequestReader::WrongType(const std::string& key, const std::string& want, const Json& got) {
  Fail(Invalid(absl::StrCat("'", key, "' must be ", want, ", got ", JsonType(got)), key));
}

std::optional<bool> RequestReader::Bool(const std::string& key) {
  const Json* v = Get(key);
  if (v == nullptr || failed()) return std::nullopt;
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v), std::nullopt;
  return v->get<bool>();
}

std::optional<double> RequestReader::Number(const std::string& key) {
  const Json* v = Get(key);
  if (v == nullptr || failed()) return std::nullopt;
  if (!v->is_number()) return WrongType(key, "a number", *v), std::nullopt;
  return v->get<double>();
}

std::optional<int64_t> RequestReader::Integer(const std::string& key) {
  const Json* v = Get(key);
  if (v == nullptr || failed()) return std::nullopt;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Fail(Invalid(absl::StrCat("'", key, "' is too large"), key)), std::nullopt;
  }
  if (!v->is_number_integer()) return WrongType(key, "an integer", *v), std::nullopt;
  return v->get<int64_t>();
}

std::optional<std::string> RequestReader::String(const std::string& key) {
  const Json* v = Get(key);
  if (v == nullptr || failed()) return std::nullopt;
  if (!v->is_string()) return WrongType(key, "a string", *v), std::nullopt;
  return v->get<std::string>();
}

std::optional<int32_t> RequestReader::Int32(const std::string& key, int64_t lo, int64_t hi) {
  std::optional<int64_t> v = Integer(key);
  if (!v) return std::nullopt;
  if (*v < lo || *v > hi) {
    return Fail(Invalid(absl::StrCat("'", key, "' is ", *v, "; it must be in [", lo, ", ", hi, "]"), key)),
           std::nullopt;
  }
  return static_cast<int32_t>(*v);
}

}  // namespace mlaserve::router::openai
