#include "router/chat_template/deepseek_v32_encoding.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
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

// The encoder's TOOLS_SYSTEM_TEMPLATE, its placeholders filled by str.format.
constexpr char kToolsTemplate[] = R"(## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml_token}function_calls>" block like the following as part of your reply to the user:
<{dsml_token}function_calls>
<{dsml_token}invoke name="$FUNCTION_NAME">
<{dsml_token}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml_token}parameter>
...
</{dsml_token}invoke>
<{dsml_token}invoke name="$FUNCTION_NAME2">
...
</{dsml_token}invoke>
</{dsml_token}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{dsml_token}function_calls>
...
</{dsml_token}function_calls>
<function_results>
...
</function_results>
{thinking_start_token}...thinking about results{thinking_end_token}
Here are the functions available in JSONSchema format:
<functions>
{tool_schemas}
</functions>
)";
constexpr char kResponseFormatHeader[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

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
    const std::string text = value.is_string() ? value.get<std::string>() : PythonJson(value);
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

// The function objects of a message's (truthy) `tools`, OpenAI's [{"type": "function",
// "function": {...}}]. The encoder takes tool["function"] from a message of any role before it
// looks at the role, so a malformed list is an error even where it is not rendered. It would
// print a `function` of any type; one that is not an object is no tool schema, so we refuse it.
absl::StatusOr<std::vector<const Json*>> ToolFunctions(const Json& tools, int64_t index) {
  if (!tools.is_array()) {
    return Invalid(index, absl::StrCat("tools must be an array of {\"type\": \"function\", \"function\": {...}}, not ",
                                       tools.type_name()));
  }
  std::vector<const Json*> functions;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const auto function = tool.find("function");  // end() for a tool that is not an object
    if (!tool.is_object() || function == tool.end()) {
      return Invalid(index, absl::StrCat("tools[", i, "] must be an object with a \"function\""));
    }
    if (!function->is_object()) {
      return Invalid(index, absl::StrCat("tools[", i, "].function must be an object (name, description, parameters), not ",
                                         function->type_name()));
    }
    functions.push_back(&*function);
  }
  return functions;
}

// What a system or developer message renders after its content: "\n\n" + the tools section
// (each function as json.dumps(function, ensure_ascii=False), one a line) where there are tools,
// "\n\n" + the response format section where there is one.
std::string ToolsAndResponseFormat(const std::vector<const Json*>& functions,
                                   const Json* response_format) {
  std::string out;
  if (!functions.empty()) {
    std::vector<std::string> schemas;
    for (const Json* function : functions) schemas.push_back(PythonJson(*function));
    // One pass, as str.format: a schema that contains "{dsml_token}" stays as it is.
    absl::StrAppend(&out, "\n\n",
                    absl::StrReplaceAll(kToolsTemplate, {{"{dsml_token}", kDsml},
                                                         {"{thinking_start_token}", kThinkStart},
                                                         {"{thinking_end_token}", kThinkEnd},
                                                         {"{tool_schemas}", absl::StrJoin(schemas, "\n")}}));
  }
  if (response_format != nullptr) {
    absl::StrAppend(&out, "\n\n", kResponseFormatHeader, PythonJson(*response_format));
  }
  return out;
}

// `last_user`: LastUserIndex(messages).
absl::StatusOr<std::string> RenderMessage(int64_t index, const std::vector<const Json*>& messages,
                                          int64_t last_user, bool thinking) {
  const Json& msg = *messages[static_cast<size_t>(index)];
  // Rendered for system and developer messages only, as by the encoder.
  std::vector<const Json*> functions;
  if (const Json* tools = Get(msg, "tools"); Truthy(tools)) {
    ASSIGN_OR_RETURN(functions, ToolFunctions(*tools, index));
  }
  const Json* response_format = Get(msg, "response_format");
  if (!Truthy(response_format)) response_format = nullptr;
  const Json* tool_calls = Get(msg, "tool_calls");
  if (!Truthy(tool_calls)) tool_calls = nullptr;
  if (tool_calls != nullptr) RETURN_IF_ERROR(CheckToolCalls(*tool_calls, index));
  const Json* content = Get(msg, "content");
  const char* think_after_user = index == last_user && thinking ? kThinkStart : kThinkEnd;

  if (RoleIs(msg, "system")) {
    ASSIGN_OR_RETURN(std::string text, StrOrEmpty(content, index, "content"));
    return text + ToolsAndResponseFormat(functions, response_format);
  }
  if (RoleIs(msg, "developer")) {
    if (!Truthy(content)) return Invalid(index, "a developer message needs content");
    ASSIGN_OR_RETURN(std::string text, Str(content, index, "content"));
    return absl::StrCat(kUser, ToolsAndResponseFormat(functions, response_format),
                        "\n\n# The user's message is: ", text, kAssistant, think_after_user);
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

Json WithRequestTools(Json messages, const Json& tools) {
  if (!messages.is_array()) return messages;  // EncodeDeepseekV32 refuses it
  if (messages.empty() || !RoleIs(messages[0], "system")) {
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}});
  }
  if (Truthy(&tools)) messages[0]["tools"] = tools;
  return messages;
}

Json WithRequestResponseFormat(Json messages, const Json& response_format) {
  if (!messages.is_array()) return messages;  // EncodeDeepseekV32 refuses it
  if (messages.empty() || !RoleIs(messages[0], "system")) {
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}});
  }
  messages[0]["response_format"] = response_format;
  return messages;
}

}  // namespace mlaserve::router::chat_template
