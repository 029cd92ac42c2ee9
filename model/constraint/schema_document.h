// The schema document as the compiler reads it (json_schema_compiler.h): the JSON type (keys in
// the schema's order), JSON pointers to its locations, and the spelling of an error that names
// one. Internal to model/constraint.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model::schema_internal {

using Json = nlohmann::ordered_json;

// Nesting of the schema document itself (JSON levels); bounds the compiler's recursion.
inline constexpr int kMaxDocumentDepth = 256;

// A JSON pointer's reference token (RFC 6901: '~' as ~0, '/' as ~1).
inline std::string EscapePointerToken(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out.push_back(c);
  }
  return out;
}

// INVALID_ARGUMENT saying `what` is wrong at `pointer` ("" is the root).
inline absl::Status SchemaError(const std::string& pointer, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("json_schema: ", what, " (at #", pointer, ")"));
}

// JSON levels of `root` (a scalar is 1); stops counting past kMaxDocumentDepth.
inline int DocumentDepth(const Json& root) {
  int deepest = 0;
  std::vector<std::pair<const Json*, int>> stack = {{&root, 1}};
  while (!stack.empty()) {
    auto [j, d] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, d);
    if (d > kMaxDocumentDepth) return d;
    if (j->is_structured()) {
      for (const Json& child : *j) stack.emplace_back(&child, d + 1);
    }
  }
  return deepest;
}

}  // namespace mlaserve::model::schema_internal
