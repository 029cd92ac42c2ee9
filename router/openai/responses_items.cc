#include "router/openai/responses_items.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/request_reader.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

ApiError BadItem(const std::string& where, const std::string& what) {
  return Invalid(absl::StrCat(where, what), "input");
}

// A string field of `item`, or the 400 saying it is missing or not a string.
std::variant<std::string, ApiError> RequiredString(const Json& item, const char* key, const std::string& where) {
  const auto it = item.find(key);
  if (it == item.end() || !it->is_string()) {
    return BadItem(where, absl::StrCat(".", key, " must be a string",
                                       it == item.end() ? "" : absl::StrCat(", got ", JsonType(*it))));
  }
  return it->get<std::string>();
}

// Parts a model cannot read here: this server's models take text only.
bool IsMediaPart(const std::string& type) {
  return type == "input_image" || type == "input_file" || type == "input_audio";
}

// A message's or a tool output's content: a string, or parts whose text types are `text_types`.
std::optional<ApiError> CheckContent(const Json& content, const std::string& where,
                                     const std::set<std::string>& text_types) {
  if (content.is_string()) return std::nullopt;
  if (!content.is_array()) {
    return BadItem(where, absl::StrCat(" must be a string or an array of content parts, got ", JsonType(content)));
  }
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string at = absl::StrCat(where, "[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return BadItem(at, " must be a content part with a string 'type'");
    }
    const std::string type = part["type"].get<std::string>();
    if (IsMediaPart(type)) {
      return BadItem(at, absl::StrCat(": '", type, "' parts are not supported: this server's models read text only"));
    }
    if (text_types.count(type) == 0) {
      return BadItem(at, absl::StrCat(": unknown content part type '", type, "'"));
    }
    const char* key = type == "refusal" ? "refusal" : "text";
    if (!part.contains(key) || !part[key].is_string()) {
      return BadItem(at, absl::StrCat(".", key, " must be a string"));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> CheckMessage(const Json& item, const std::string& where) {
  std::variant<std::string, ApiError> role = RequiredString(item, "role", where);
  if (auto* e = std::get_if<ApiError>(&role)) return *e;
  const std::string& r = std::get<std::string>(role);
  if (r != "user" && r != "system" && r != "developer" && r != "assistant") {
    return BadItem(where, absl::StrCat(".role '", r, "' is not one of user, system, developer, assistant"));
  }
  const auto content = item.find("content");
  if (content == item.end()) return BadItem(where, ".content is required");
  return CheckContent(*content, where + ".content", {"input_text", "output_text", "refusal"});
}

std::optional<ApiError> CheckItem(const Json& item, const std::string& where) {
  if (!item.is_object()) return BadItem(where, absl::StrCat(" must be an object, got ", JsonType(item)));
  std::string type = "message";
  if (const auto t = item.find("type"); t != item.end()) {
    if (!t->is_string()) return BadItem(where, ".type must be a string");
    type = t->get<std::string>();
  }
  if (type == "message") return CheckMessage(item, where);
  if (type == "function_call") {
    for (const char* key : {"call_id", "name"}) {
      std::variant<std::string, ApiError> v = RequiredString(item, key, where);
      if (auto* e = std::get_if<ApiError>(&v)) return *e;
    }
    const auto arguments = item.find("arguments");
    if (arguments == item.end() || !(arguments->is_string() || arguments->is_object())) {
      return BadItem(where, ".arguments must be the call's JSON arguments as a string");
    }
    return std::nullopt;
  }
  if (type == "function_call_output") {
    std::variant<std::string, ApiError> call_id = RequiredString(item, "call_id", where);
    if (auto* e = std::get_if<ApiError>(&call_id)) return *e;
    const auto output = item.find("output");
    if (output == item.end()) return BadItem(where, ".output is required");
    return CheckContent(*output, where + ".output", {"input_text", "output_text"});
  }
  if (type == "reasoning") {
    for (const char* key : {"content", "summary"}) {
      const auto parts = item.find(key);
      if (parts == item.end() || parts->is_null()) continue;
      if (!parts->is_array()) return BadItem(where, absl::StrCat(".", key, " must be an array"));
      for (const Json& part : *parts) {
        if (!part.is_object() || !part.contains("text") || !part["text"].is_string()) {
          return BadItem(where, absl::StrCat(".", key, ": each part must have a string 'text'"));
        }
      }
    }
    return std::nullopt;
  }
  if (type == "item_reference") {
    return BadItem(where, ": 'item_reference' items are not supported: send the item itself, or continue a "
                          "stored response with previous_response_id");
  }
  return BadItem(where, absl::StrCat(": items of type '", type,
                                     "' are not supported (message, function_call, function_call_output, "
                                     "reasoning)"));
}

// Content as chat's text parts ({"type": "text", "text"}), which chat joins as it joins its own.
Json ChatContent(const Json& content) {
  if (content.is_string()) return content;
  Json parts = Json::array();
  for (const Json& part : content) {
    const bool refusal = part["type"] == "refusal";
    parts.push_back(Json{{"type", "text"}, {"text", part[refusal ? "refusal" : "text"]}});
  }
  return parts;
}

// A reasoning item's text: its reasoning_text content, else its summary.
std::string ReasoningText(const Json& item) {
  for (const char* key : {"content", "summary"}) {
    const auto parts = item.find(key);
    if (parts == item.end() || !parts->is_array() || parts->empty()) continue;
    std::string text;
    for (const Json& part : *parts) {
      if (!text.empty()) text += "\n";
      text += part["text"].get<std::string>();
    }
    return text;
  }
  return "";
}

}  // namespace

std::variant<Json, ApiError> NormalizeInputItems(const Json& input) {
  if (input.is_string()) {
    return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", input}}});
  }
  if (!input.is_array()) {
    return Invalid(absl::StrCat("'input' must be a string or an array of input items, got ", JsonType(input)),
                   "input");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    if (std::optional<ApiError> e = CheckItem(input[i], absl::StrCat("input[", i, "]"))) return *e;
  }
  return input;
}

Json ItemsToChatMessages(const Json& items) {
  Json messages = Json::array();
  std::string reasoning;  // of the assistant message to come
  // The assistant message that function_call items join: a new one when the last message is not
  // the assistant's.
  const auto assistant = [&](Json content) -> Json& {
    Json message = Json{{"role", "assistant"}, {"content", std::move(content)}};
    if (!reasoning.empty()) message["reasoning_content"] = std::exchange(reasoning, "");
    messages.push_back(std::move(message));
    return messages.back();
  };
  for (const Json& item : items) {
    const std::string type = item.contains("type") ? item["type"].get<std::string>() : "message";
    if (type == "message") {
      std::string role = item["role"].get<std::string>();
      if (role == "assistant") {
        assistant(ChatContent(item["content"]));
        continue;
      }
      reasoning.clear();  // a reasoning item answers no user or system message
      messages.push_back(Json{{"role", role == "developer" ? "system" : role}, {"content", ChatContent(item["content"])}});
    } else if (type == "function_call") {
      const bool joins = !messages.empty() && messages.back()["role"] == "assistant" && reasoning.empty();
      Json& message = joins ? messages.back() : assistant(nullptr);
      if (!message.contains("tool_calls")) message["tool_calls"] = Json::array();
      message["tool_calls"].push_back(Json{{"id", item["call_id"]},
                                           {"type", "function"},
                                           {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    } else if (type == "function_call_output") {
      reasoning.clear();
      messages.push_back(Json{{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", ChatContent(item["output"])}});
    } else if (type == "reasoning") {
      const std::string text = ReasoningText(item);
      if (!reasoning.empty() && !text.empty()) reasoning += "\n";
      reasoning += text;
    }
  }
  return messages;
}

}  // namespace mlaserve::router::openai
