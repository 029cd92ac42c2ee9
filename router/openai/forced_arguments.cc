#include "router/openai/forced_arguments.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

ForcedArguments JsonMode(std::string why) {
  ForcedArguments out;
  out.why_not_schema = std::move(why);
  return out;
}

// A tool's parameters as a schema we could hold its arguments to, or why not.
std::optional<std::string> ObjectSchemaProblem(const Json& function) {
  const std::string name = function.value("name", "");
  const auto it = function.find("parameters");
  if (it == function.end() || it->is_null()) {
    return absl::StrCat("function '", name, "' has no parameters schema");
  }
  const auto type = it->find("type");
  if (type == it->end() || !type->is_string() || type->get<std::string>() != "object") {
    return absl::StrCat("function '", name, "': parameters is not {\"type\": \"object\", ...}");
  }
  return std::nullopt;
}

bool Strict(const Json& function) {
  const auto it = function.find("strict");
  return it != function.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

ForcedArguments ForcedArgumentsFor(const Json& tools, const std::optional<std::string>& named) {
  ForcedArguments out;
  if (named.has_value()) {
    for (const Json& tool : tools) {
      const Json& function = tool.at("function");
      if (function.value("name", "") != *named) continue;
      if (std::optional<std::string> problem = ObjectSchemaProblem(function)) {
        return JsonMode(*problem);
      }
      out.schema = function["parameters"].dump();
      out.strict = Strict(function);
      break;
    }
    if (!out.schema.has_value()) return JsonMode(absl::StrCat("no function named '", *named, "'"));
  } else {
    Json any_of = Json::array();
    bool strict = !tools.empty();
    for (const Json& tool : tools) {
      const Json& function = tool.at("function");
      if (std::optional<std::string> problem = ObjectSchemaProblem(function)) {
        return JsonMode(*problem);
      }
      any_of.push_back(function["parameters"]);
      strict = strict && Strict(function);
    }
    if (any_of.empty()) return JsonMode("no tools");
    out.schema = any_of.size() == 1 ? any_of[0].dump() : Json{{"anyOf", any_of}}.dump();
    out.strict = strict;
  }
  if (out.schema->size() > model::kMaxSchemaBytes) {
    return JsonMode(absl::StrCat("the arguments' schema has ", out.schema->size(),
                                 " bytes; at most ", model::kMaxSchemaBytes, " are enforced"));
  }
  if (absl::StatusOr<std::shared_ptr<const model::JsonSchema>> compiled =
          model::JsonSchema::Get(*out.schema, out.strict);
      !compiled.ok()) {
    return JsonMode(std::string(compiled.status().message()));
  }
  return out;
}

}  // namespace mlaserve::router::openai
