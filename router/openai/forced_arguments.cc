#include "router/openai/forced_arguments.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/constraint/json_schema.h"
#include "spdlog/spdlog.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// Any JSON object: what a tool's arguments are held to when its schema is not enforced.
constexpr char kAnyObject[] = R"({"type":"object"})";

bool Strict(const Json& function) {
  const auto it = function.find("strict");
  return it != function.end() && it->is_boolean() && it->get<bool>();
}

// `function`'s parameters as a schema we hold its arguments to, or why not.
ForcedArguments ParametersOf(const Json& function) {
  ForcedArguments out;
  const std::string name = function.value("name", "");
  const auto it = function.find("parameters");
  if (it == function.end() || it->is_null()) {
    out.why_not_schema = absl::StrCat("function '", name, "' has no parameters schema");
    return out;
  }
  const auto type = it->find("type");
  if (type == it->end() || !type->is_string() || type->get<std::string>() != "object") {
    out.why_not_schema =
        absl::StrCat("function '", name, "': parameters is not {\"type\": \"object\", ...}");
    return out;
  }
  std::string schema = it->dump();
  if (schema.size() > model::kMaxSchemaBytes) {
    out.why_not_schema = absl::StrCat("function '", name, "': the arguments' schema has ",
                                      schema.size(), " bytes; at most ", model::kMaxSchemaBytes,
                                      " are enforced");
    return out;
  }
  const bool strict = Strict(function);
  if (absl::StatusOr<std::shared_ptr<const model::JsonSchema>> compiled =
          model::JsonSchema::Get(schema, strict);
      !compiled.ok()) {
    out.why_not_schema = absl::StrCat("function '", name, "': ", compiled.status().message());
    return out;
  }
  out.schema = std::move(schema);
  out.strict = strict;
  return out;
}

}  // namespace

ForcedArguments ForcedArgumentsFor(const Json& tools, const std::string& named) {
  for (const Json& tool : tools) {
    const Json& function = tool.at("function");
    if (function.value("name", "") == named) return ParametersOf(function);
  }
  ForcedArguments out;
  out.why_not_schema = absl::StrCat("no function named '", named, "'");
  return out;
}

RequiredCallChoices RequiredCallChoicesFor(
    const Json& tools, const std::function<std::string(const std::string& name)>& prefix) {
  RequiredCallChoices out;
  size_t schema_bytes = 0;
  for (const Json& tool : tools) {
    const Json& function = tool.at("function");
    const std::string name = function.value("name", "");
    ForcedArguments arguments = ParametersOf(function);
    if (!arguments.schema.has_value()) {
      absl::StrAppend(&out.why_not, out.why_not.empty() ? "" : "; ", arguments.why_not_schema,
                      " (its arguments are held to one JSON object)");
      arguments.schema = kAnyObject;
    }
    schema_bytes += arguments.schema->size();
    out.choices.push_back({prefix(name), std::move(*arguments.schema), arguments.strict});
  }
  if (out.choices.size() > common::kMaxSchemaChoices) {
    out.choices.clear();
    out.why_not = absl::StrCat("the request has ", tools.size(), " tools; at most ",
                               common::kMaxSchemaChoices, " are told apart");
  } else if (schema_bytes > common::kMaxSchemaChoicesBytes) {
    out.choices.clear();
    out.why_not = absl::StrCat("the tools' schemas have ", schema_bytes, " bytes together; at most ",
                               common::kMaxSchemaChoicesBytes, " are enforced");
  }
  return out;
}

void ConstrainForcedCall(ToolCallFormat format, const ApiRequest& r,
                         const std::vector<std::string>& history_call_ids, v1::SamplingParams* s) {
  if (s->ignore_eos()) return;
  const bool named = r.tool_choice == ApiRequest::ToolChoice::kNamed;
  const std::optional<std::string_view> start = ToolCallParser::ArgumentsStart(format);
  if (!start.has_value()) {
    // DSML: its parameters are not JSON, so a named call is what the model writes, and a
    // "required" one's name is held to the tools' (choices without a schema).
    if (named || r.tools.size() > common::kMaxSchemaChoices) return;
    s->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
    for (const Json& tool : r.tools) {
      const std::string name = tool.at("function").value("name", "");
      s->add_response_format_choices()->set_prefix(
          ToolCallParser::RequiredCallPrefix(format, name, history_call_ids));
    }
    return;
  }
  if (named) {
    const ForcedArguments arguments = ForcedArgumentsFor(r.tools, r.tool_name);
    if (arguments.schema.has_value()) {
      s->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
      s->set_response_format_schema(*arguments.schema);
      s->set_response_format_schema_strict(arguments.strict);
    } else {
      spdlog::debug("forced tool call: arguments held to one JSON object, not a schema: {}",
                    arguments.why_not_schema);
      s->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
    }
    return;
  }
  const RequiredCallChoices required =
      RequiredCallChoicesFor(r.tools, [&](const std::string& name) {
        return ToolCallParser::RequiredCallPrefix(format, name, history_call_ids);
      });
  if (!required.why_not.empty()) spdlog::debug("tool_choice \"required\": {}", required.why_not);
  if (required.choices.empty()) {
    s->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
    s->set_response_format_after(std::string(*start));
    return;
  }
  s->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
  for (const common::SchemaChoice& c : required.choices) {
    v1::SchemaChoice* out = s->add_response_format_choices();
    out->set_prefix(c.prefix);
    out->set_schema(c.schema);
    out->set_strict(c.strict);
  }
}

}  // namespace mlaserve::router::openai
