// What a forced tool call's arguments are held to (tool_choice "required" or a named function,
// in DeepSeek-V3 / V3.1 or Kimi-K2 syntax, where the arguments are one JSON text; http_api.cc).
//
// As vLLM and SGLang do with guided decoding for a named tool choice, the arguments are held to
// the tool's `parameters` schema (structured outputs, model/constraint/json_schema.h) when we
// can enforce it, else to one JSON object (JSON mode). Not enforcing a schema is never an
// error: OpenAI accepts any JSON Schema as `parameters`, and the tool was accepted with it, so
// the request is served with the weaker constraint (the reason is logged at debug level).
//
//   named:    the function's `parameters`, with its `strict`;
//   required: anyOf over every tool's `parameters` (the model chooses the name after the
//             constraint starts, so the arguments match *some* tool's schema, not necessarily
//             the one it named), strict only when every tool is.
#pragma once

#include <optional>
#include <string>

#include "nlohmann/json.hpp"

namespace mlaserve::router::openai {

struct ForcedArguments {
  // The JSON Schema text (response_format_schema), key order as the request wrote it; nullopt:
  // JSON mode (one JSON object), for the reason in `why_not_schema`.
  std::optional<std::string> schema;
  bool strict = false;  // response_format_schema_strict
  std::string why_not_schema;
};

// `tools` as ApiRequest::tools holds them (validated: OpenAI's shape, names unique); `named`
// the forced function's name (in `tools`), nullopt for "required". A `parameters` is used only
// when it is an object schema ("type": "object", as OpenAI requires of function parameters:
// V3 / V3.1 / Kimi-K2's arguments are a JSON object), the compiled schema (model::JsonSchema::Get, the
// process cache the router's validation also reads) is accepted, and its text fits
// model::kMaxSchemaBytes.
ForcedArguments ForcedArgumentsFor(const nlohmann::ordered_json& tools,
                                   const std::optional<std::string>& named);

}  // namespace mlaserve::router::openai
