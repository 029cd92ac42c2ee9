// What a forced tool call's arguments are held to (tool_choice "required" or a named function,
// in DeepSeek-V3 / V3.1 or Kimi-K2 syntax, where the arguments are one JSON text; http_api.cc).
//
// As vLLM and SGLang do with guided decoding, the arguments are held to the tool's
// `parameters` schema (structured outputs, model/constraint/json_schema.h) when we can enforce
// it, else to one JSON object (JSON mode). Not enforcing a schema is never an error: OpenAI
// accepts any JSON Schema as `parameters`, and the tool was accepted with it, so the request is
// served with the weaker constraint (the reason is logged).
//
//   named:    the function's `parameters`, with its `strict`, from the first token (the prompt
//             ends with the call's opening and the name);
//   required: the model writes the name, so the constraint starts there: one schema choice per
//             tool (api.proto response_format_choices), its prefix the tool's name and what the
//             format writes up to the arguments, its schema that tool's `parameters`. The
//             name is one of the tools' and the arguments match *that* tool's schema (DSML:
//             the name only; its parameters are not JSON).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/request_limits.h"
#include "mlaserve/v1/api.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"
#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {

struct ForcedArguments {
  // The JSON Schema text (response_format_schema), key order as the request wrote it; nullopt:
  // JSON mode (one JSON object), for the reason in `why_not_schema`.
  std::optional<std::string> schema;
  bool strict = false;  // response_format_schema_strict
  std::string why_not_schema;
};

// `tools` as ApiRequest::tools holds them (validated: OpenAI's shape, names unique); `named`
// the forced function's name (in `tools`). Its `parameters` is used only when it is an object
// schema ("type": "object", as OpenAI requires of function parameters: V3 / V3.1 / Kimi-K2's
// arguments are a JSON object), the compiled schema (model::JsonSchema::Get, the process cache
// the router's validation also reads) is accepted, and its text fits model::kMaxSchemaBytes.
ForcedArguments ForcedArgumentsFor(const nlohmann::ordered_json& tools, const std::string& named);

struct RequiredCallChoices {
  // One per tool, in the request's order. A tool whose `parameters` cannot be enforced (as
  // ForcedArgumentsFor judges it) has {"type":"object"}: its arguments are one JSON object, and
  // its name is still one of the tools'. Empty when there are more tools than
  // common::kMaxSchemaChoices or their schemas are over common::kMaxSchemaChoicesBytes together
  // (then JSON mode after the separator, as before choices existed), `why_not` saying so.
  std::vector<common::SchemaChoice> choices;
  // Each tool held to one object and why ("; "-joined), or why there are no choices.
  std::string why_not;
};

// tool_choice "required": `prefix(name)` is the text from the call's name to its arguments
// (ToolCallParser::RequiredCallPrefix).
RequiredCallChoices RequiredCallChoicesFor(
    const nlohmann::ordered_json& tools,
    const std::function<std::string(const std::string& name)>& prefix);

// Sets `sampling`'s response format for the forced call of `r` (tool_choice "required" or a
// named function) in `format`: a named function's arguments from the first token (the prompt
// ends with its opening and name), "required"'s schema choices from the name on, JSON mode
// where no schema is enforced (logged at debug level). deepseek_v32 (DSML's arguments are not
// JSON): "required"'s name only, by choices without a schema; nothing for a named call. Nothing
// with ignore_eos (a constraint ends with EOS). `history_call_ids`: the request's (kimi_k2's ids
// count them).
void ConstrainForcedCall(ToolCallFormat format, const ApiRequest& r,
                         const std::vector<std::string>& history_call_ids,
                         v1::SamplingParams* sampling);

}  // namespace mlaserve::router::openai
