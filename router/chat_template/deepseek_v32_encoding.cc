#include "router/chat_template/deepseek_v32_encoding.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kUser[] = "<｜User｜>";
constexpr char kAssistant[] = "<｜Assistant｜>";
constexpr char kThinkStart[] = "<think>";
constexpr char kThinkEnd[] = "</think>";
constexpr char kDsml[] = "｜DSML｜";

absl::Status Invalid(int64_t index, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("messages[", index, "]: ", what));
}

// Python's truthiness of a JSON value.
bool Truthy(const Json* v) { return v != nullptr && Value::FromJson(*v).Truthy(); }

// msg.get(key): nullptr where the key is absent or null.
const Json* Get(const Json& msg, const char* key) {
  auto it = msg.find(key);
  return it == msg.end() || it->is_null() ? nullptr : &*it;
}

// str(value) of a message field as str.format prints it ("None" for null / absent).
absl::StatusOr<std::string> Str(const Json* v, int64_t index, const char* field) {
  if (v == nullptr) return std::string("None");
  absl::StatusOr<std::string> text = ToText(Value::FromJson(*v));
  if (!text.ok()) return Invalid(index, absl::StrCat(field, " must be a string, a number, a boolean or null"));
  return text;
}

// `value or ""`, printed.
absl::StatusOr<std::string> StrOrEmpty(const Json* v, int64_t index, const char* field) {
  if (!Truthy(v)) return std::string();
  return Str(v, index, field);
}

bool RoleIs(const Json& msg, std::string_view role) {
  const Json* r = Get(msg, "role");
  return r != nullptr && r->is_string() && r->get_ref<const std::string&>() == role;
}

// messages[i] with Python's negative indexing (the encoder looks at messages[-1] from a first
// tool message).
const Json& At(const std::vector<const Json*>& messages, int64_t i) {
  return *messages[static_cast<size_t>(i < 0 ? static_cast<int64_t>(messages.size()) + i : i)];
}

int64_t LastUserIndex(const std::vector<const Json*>& messages) {
  for (int64_t i = static_cast<int64_t>(messages.size()) - 1; i >= 0; --i) {
    if (RoleIs(*messages[i], "user") || RoleIs(*messages[i], "developer")) return i;
  }
  return -1;
}

// One call's arguments as DSML parameters: strings as they are, other values as JSON.
absl::StatusOr<std::string> DsmlParameters(const Json& arguments_field, int64_t index) {
  Json arguments = arguments_field;
  if (arguments_field.is_string()) {
    arguments = Json::parse(arguments_field.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (arguments.is_discarded()) return Invalid(index, "a tool call's function.arguments is not valid JSON");
  }
  if (!arguments.is_object()) return Invalid(index, "a tool call's function.arguments must be a JSON object");
  std::vector<std::string> parameters;
  for (const auto& [key, value] : arguments.items()) {
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else {
      ASSIGN_OR_RETURN(text, ToJson(Value::FromJson(value)));
    }
    parameters.push_back(absl::StrCat("<", kDsml, "parameter name=\"", key, "\" string=\"",
                                      value.is_string() ? "true" : "false", "\">", text, "</", kDsml,
                                      "parameter>"));
  }
  return absl::StrJoin(parameters, "\n");
}

// The shape OpenAI gives tool calls, [{type, function: {name, arguments}}], which the encoder
// reads from a message of any role before it looks at the role.
absl::Status CheckToolCalls(const Json& tool_calls, int64_t index) {
  if (!tool_calls.is_array()) return Invalid(index, "tool_calls must be an array");
  for (const Json& call : tool_calls) {
    const Json* function = call.is_object() ? Get(call, "function") : nullptr;
    if (function == nullptr || !function->is_object() || !function->contains("name") ||
        !function->contains("arguments")) {
      return Invalid(index, "each tool call needs a function with a name and arguments");
    }
  }
  return absl::OkStatus();
}

// "\n\n<｜DSML｜function_calls>\n<invoke>...\n</｜DSML｜function_calls>" for an assistant
// message's (checked) tool_calls.
absl::StatusOr<std::string> DsmlToolCalls(const Json& tool_calls, int64_t index) {
  std::vector<std::string> invokes;
  for (const Json& call : tool_calls) {
    const Json& function = call["function"];
    ASSIGN_OR_RETURN(std::string name, Str(Get(function, "name"), index, "a tool call's function.name"));
    ASSIGN_OR_RETURN(std::string parameters, DsmlParameters(function["arguments"], index));
    invokes.push_back(absl::StrCat("<", kDsml, "invoke name=\"", name, "\">\n", parameters, "\n</", kDsml,
                                   "invoke>"));
  }
  return absl::StrCat("\n\n<", kDsml, "function_calls>\n", absl::StrJoin(invokes, "\n"), "\n</", kDsml,
                      "function_calls>");
}

// `last_user`: LastUserIndex(messages).
absl::StatusOr<std::string> RenderMessage(int64_t index, const std::vector<const Json*>& messages,
                                          int64_t last_user, bool thinking) {
  const Json& msg = *messages[static_cast<size_t>(index)];
  if (Truthy(Get(msg, "tools"))) {
    return Invalid(index, "'tools' is not supported: tool calls are not parsed from the output");
  }
  if (Truthy(Get(msg, "response_format"))) {
    return Invalid(index, "'response_format' is not supported: the output is not constrained to a schema");
  }
  const Json* tool_calls = Get(msg, "tool_calls");
  if (!Truthy(tool_calls)) tool_calls = nullptr;
  if (tool_calls != nullptr) RETURN_IF_ERROR(CheckToolCalls(*tool_calls, index));
  const Json* content = Get(msg, "content");
  const char* think_after_user = index == last_user && thinking ? kThinkStart : kThinkEnd;

  if (RoleIs(msg, "system")) return StrOrEmpty(content, index, "content");
  if (RoleIs(msg, "developer")) {
    if (!Truthy(content)) return Invalid(index, "a developer message needs content");
    ASSIGN_OR_RETURN(std::string text, Str(content, index, "content"));
    return absl::StrCat(kUser, "\n\n# The user's message is: ", text, kAssistant, think_after_user);
  }
  if (RoleIs(msg, "user")) {
    ASSIGN_OR_RETURN(std::string text, Str(content, index, "content"));
    return absl::StrCat(kUser, text, kAssistant, think_after_user);
  }
  if (RoleIs(msg, "tool")) {
    // The assistant message whose calls these results answer: the first one before the run of
    // tool messages this one is in.
    int64_t assistant_index = index - 1;
    const Json* assistant = &At(messages, assistant_index);
    while (assistant_index >= 0 && RoleIs(*assistant, "tool")) {
      --assistant_index;
      assistant = &At(messages, assistant_index);
    }
    if (!(index == 0 || (assistant_index >= 0 && RoleIs(*assistant, "assistant")))) {
      return Invalid(index, "a tool message must follow an assistant message with tool_calls");
    }
    const int64_t order = index - assistant_index;
    const Json* calls = Get(*assistant, "tool_calls");
    if (!Truthy(calls) || !calls->is_array() || static_cast<int64_t>(calls->size()) < order) {
      return Invalid(index, "a tool result without a tool call in the assistant message before it");
    }
    ASSIGN_OR_RETURN(std::string text, Str(content, index, "content"));
    std::string out = order == 1 ? "\n\n<function_results>" : "";
    absl::StrAppend(&out, "\n<result>", text, "</result>");
    if (order == static_cast<int64_t>(calls->size())) {
      absl::StrAppend(&out, "\n</function_results>\n\n", index >= last_user && thinking ? kThinkStart : kThinkEnd);
    }
    return out;
  }
  if (RoleIs(msg, "assistant")) {
    std::string reasoning;
    if (thinking && index > last_user) {
      const Json* reasoning_content = Get(msg, "reasoning_content");
      if (!Truthy(reasoning_content) && tool_calls == nullptr) {
        return Invalid(index, "in thinking mode an assistant message after the last user message needs "
                              "reasoning_content or tool_calls");
      }
      ASSIGN_OR_RETURN(reasoning, StrOrEmpty(reasoning_content, index, "reasoning_content"));
      reasoning += kThinkEnd;
    }
    ASSIGN_OR_RETURN(std::string text, StrOrEmpty(content, index, "content"));
    std::string calls;
    if (tool_calls != nullptr) {
      ASSIGN_OR_RETURN(calls, DsmlToolCalls(*tool_calls, index));
    }
    return absl::StrCat(reasoning, text, calls, kDeepseekV32Eos);
  }
  const Json* role = Get(msg, "role");
  const std::string shown = role == nullptr ? "null" : role->is_string() ? role->dump() : std::string("not a string");
  return Invalid(index, absl::StrCat("role ", shown, " is not one of system, user, developer, assistant, tool"));
}

}  // namespace

absl::StatusOr<std::string> EncodeDeepseekV32(const Json& messages, bool thinking) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  std::vector<const Json*> all;
  for (const Json& msg : messages) {
    if (!msg.is_object()) return Invalid(static_cast<int64_t>(all.size()), "must be an object");
    all.push_back(&msg);
  }
  // Thinking mode drops the reasoning of assistant messages before the last user message (which
  // is never rendered there anyway) and keeps only system, user, tool and assistant messages
  // there; the encoder still renders as many messages as it was given, so a message of another
  // role there is an error.
  const int64_t last_user = LastUserIndex(all);
  if (thinking) {
    for (int64_t i = 0; i < last_user; ++i) {
      const Json& msg = *all[i];
      if (!RoleIs(msg, "user") && !RoleIs(msg, "system") && !RoleIs(msg, "tool") && !RoleIs(msg, "assistant")) {
        return Invalid(i, "in thinking mode only system, user, tool and assistant messages may come before "
                          "the last user message");
      }
    }
  }
  std::string prompt = kDeepseekV32Bos;
  for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) {
    ASSIGN_OR_RETURN(std::string part, RenderMessage(i, all, last_user, thinking));
    prompt += part;
  }
  return prompt;
}

}  // namespace mlaserve::router::chat_template
