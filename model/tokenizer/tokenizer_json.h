// Small non-throwing accessors for tokenizer.json fields. Every error names the JSON path of
// the field (e.g. "pre_tokenizer.pretokenizers[2].behavior") so a user can find it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model::tokenizer_json {

using Json = nlohmann::json;

inline std::string TypeName(const Json& j) { return j.type_name(); }

inline absl::StatusOr<const Json*> Field(const Json& obj, const std::string& key,
                                         const std::string& path) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", path, " must be an object, got ", TypeName(obj)));
  }
  auto it = obj.find(key);
  if (it == obj.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", path, " has no field \"", key, "\""));
  }
  return &*it;
}

inline absl::StatusOr<std::string> StringField(const Json& obj, const std::string& key,
                                               const std::string& path) {
  absl::StatusOr<const Json*> f = Field(obj, key, path);
  if (!f.ok()) return f.status();
  if (!(*f)->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", path, ".", key,
                                                   " must be a string, got ", TypeName(**f),
                                                   " ", (*f)->dump()));
  }
  return (*f)->get<std::string>();
}

// A boolean field that may be absent (then `fallback`) but not of another type.
inline absl::StatusOr<bool> BoolField(const Json& obj, const std::string& key, bool fallback,
                                      const std::string& path) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", path, " must be an object, got ", TypeName(obj)));
  }
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", path, ".", key,
                                                   " must be a boolean, got ", it->dump()));
  }
  return it->get<bool>();
}

}  // namespace mlaserve::model::tokenizer_json
