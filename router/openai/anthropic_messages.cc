#include "router/openai/anthropic_messages.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/request_reader.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// Block types that carry media or documents: this server's models read text only.
bool IsMediaBlock(const std::string& type) {
  return type == "image" || type == "document" || type == "search_result" || type == "container_upload";
}

// Blocks of Anthropic's server tools (web search, code execution, ...), which this server does not run.
bool IsServerToolBlock(const std::string& type) {
  return type == "server_tool_use" || type == "mcp_tool_use" || type == "mcp_tool_result" ||
         type == "tool_reference" || (type.size() > 12 && type.ends_with("_tool_result"));
}

ApiError Bad(const std::string& where, const std::string& what, const char* param) {
  return Invalid(absl::StrCat(where, what), param);
}

// `block[key]` as a string, or the 400 naming it.
std::variant<std::string, ApiError> StringField(const Json& block, const char* key, const std::string& where) {
  const auto it = block.find(key);
  if (it == block.end() || it->is_null()) return Bad(absl::StrCat(where, ".", key), ": Field required", "messages");
  if (!it->is_string()) {
    return Bad(absl::StrCat(where, ".", key), absl::StrCat(" must be a string, got ", JsonType(*it)), "messages");
  }
  return it->get<std::string>();
}

// A block's type, or the 400 saying it has none.
std::variant<std::string, ApiError> BlockType(const Json& block, const std::string& where, const char* param) {
  if (!block.is_object()) return Bad(where, absl::StrCat(" must be a content block, got ", JsonType(block)), param);
  const auto it = block.find("type");
  if (it == block.end() || !it->is_string()) return Bad(where, ".type must be a string", param);
  return it->get<std::string>();
}

std::optional<ApiError> Unreadable(const std::string& type, const std::string& where, const char* param) {
  if (IsMediaBlock(type)) {
    return Bad(where, absl::StrCat(": '", type, "' content blocks are not supported: this server's models read text only"),
               param);
  }
  if (IsServerToolBlock(type)) {
    return Bad(where, absl::StrCat(": '", type, "' blocks are not supported: this server runs no server tools"), param);
  }
  return std::nullopt;
}

// Text blocks ({"type": "text", "text"}) as chat's text parts; `where` names the list.
std::variant<Json, ApiError> TextParts(const Json& blocks, const std::string& where, const char* param) {
  Json parts = Json::array();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = absl::StrCat(where, ".", i);
    std::variant<std::string, ApiError> type = BlockType(blocks[i], at, param);
    if (auto* e = std::get_if<ApiError>(&type)) return *e;
    const std::string& t = std::get<std::string>(type);
    if (std::optional<ApiError> e = Unreadable(t, at, param)) return *e;
    if (t != "text") return Bad(at, absl::StrCat(": '", t, "' blocks are not allowed here (text only)"), param);
    const auto text = blocks[i].find("text");
    if (text == blocks[i].end() || !text->is_string()) return Bad(at, ".text must be a string", param);
    parts.push_back(Json{{"type", "text"}, {"text", *text}});
  }
  return parts;
}

// A tool_result block as a chat tool message.
std::variant<Json, ApiError> ToolMessage(const Json& block, const std::string& where) {
  std::variant<std::string, ApiError> id = StringField(block, "tool_use_id", where);
  if (auto* e = std::get_if<ApiError>(&id)) return *e;
  if (const auto is_error = block.find("is_error"); is_error != block.end() && !is_error->is_null() &&
                                                    !is_error->is_boolean()) {
    return Bad(where, ".is_error must be a boolean", "messages");
  }
  Json content = "";
  if (const auto c = block.find("content"); c != block.end() && !c->is_null()) {
    if (c->is_string()) {
      content = *c;
    } else if (c->is_array()) {
      std::variant<Json, ApiError> parts = TextParts(*c, where + ".content", "messages");
      if (auto* e = std::get_if<ApiError>(&parts)) return *e;
      content = std::get<Json>(std::move(parts));
    } else {
      return Bad(where, absl::StrCat(".content must be a string or an array of text blocks, got ", JsonType(*c)),
                 "messages");
    }
  }
  return Json{{"role", "tool"}, {"tool_call_id", std::get<std::string>(id)}, {"content", std::move(content)}};
}

// A user message's blocks as chat messages, appended to `out`: text runs as user messages,
// tool results as tool messages, in order.
std::optional<ApiError> AddUserBlocks(const Json& blocks, const std::string& where, Json& out) {
  Json text = Json::array();
  const auto flush = [&] {
    if (!text.empty()) out.push_back(Json{{"role", "user"}, {"content", std::exchange(text, Json::array())}});
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = absl::StrCat(where, ".", i);
    std::variant<std::string, ApiError> type = BlockType(blocks[i], at, "messages");
    if (auto* e = std::get_if<ApiError>(&type)) return *e;
    const std::string& t = std::get<std::string>(type);
    if (std::optional<ApiError> e = Unreadable(t, at, "messages")) return e;
    if (t == "text") {
      std::variant<std::string, ApiError> s = StringField(blocks[i], "text", at);
      if (auto* e = std::get_if<ApiError>(&s)) return *e;
      text.push_back(Json{{"type", "text"}, {"text", std::get<std::string>(s)}});
    } else if (t == "tool_result") {
      std::variant<Json, ApiError> tool = ToolMessage(blocks[i], at);
      if (auto* e = std::get_if<ApiError>(&tool)) return *e;
      flush();
      out.push_back(std::get<Json>(std::move(tool)));
    } else if (t == "tool_use" || t == "thinking" || t == "redacted_thinking") {
      return Bad(at, absl::StrCat(": '", t, "' blocks belong in assistant messages"), "messages");
    } else {
      return Bad(at, absl::StrCat(": unknown content block type '", t,
                                  "' (user messages take text and tool_result blocks)"), "messages");
    }
  }
  flush();
  return std::nullopt;
}

// An assistant message's blocks as one chat assistant message.
std::variant<Json, ApiError> AssistantMessage(const Json& blocks, const std::string& where) {
  Json text = Json::array();
  Json calls = Json::array();
  std::string reasoning;
  bool reasoned = false;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = absl::StrCat(where, ".", i);
    std::variant<std::string, ApiError> type = BlockType(blocks[i], at, "messages");
    if (auto* e = std::get_if<ApiError>(&type)) return *e;
    const std::string& t = std::get<std::string>(type);
    if (std::optional<ApiError> e = Unreadable(t, at, "messages")) return *e;
    if (t == "text") {
      std::variant<std::string, ApiError> s = StringField(blocks[i], "text", at);
      if (auto* e = std::get_if<ApiError>(&s)) return *e;
      text.push_back(Json{{"type", "text"}, {"text", std::get<std::string>(s)}});
    } else if (t == "tool_use") {
      std::variant<std::string, ApiError> id = StringField(blocks[i], "id", at);
      if (auto* e = std::get_if<ApiError>(&id)) return *e;
      std::variant<std::string, ApiError> name = StringField(blocks[i], "name", at);
      if (auto* e = std::get_if<ApiError>(&name)) return *e;
      const auto input = blocks[i].find("input");
      if (input == blocks[i].end() || !input->is_object()) {
        return Bad(at, ".input must be an object (the tool's arguments)", "messages");
      }
      calls.push_back(Json{{"id", std::get<std::string>(id)},
                           {"type", "function"},
                           {"function", {{"name", std::get<std::string>(name)}, {"arguments", *input}}}});
    } else if (t == "thinking") {
      std::variant<std::string, ApiError> s = StringField(blocks[i], "thinking", at);
      if (auto* e = std::get_if<ApiError>(&s)) return *e;
      if (reasoned) reasoning += "\n";
      reasoning += std::get<std::string>(s);
      reasoned = true;
    } else if (t == "redacted_thinking") {
      // Another server's encrypted reasoning: nothing a template could show.
    } else if (t == "tool_result") {
      return Bad(at, ": 'tool_result' blocks belong in user messages", "messages");
    } else {
      return Bad(at, absl::StrCat(": unknown content block type '", t,
                                  "' (assistant messages take text, tool_use, thinking and redacted_thinking "
                                  "blocks)"), "messages");
    }
  }
  Json message = Json{{"role", "assistant"}, {"content", nullptr}};
  if (!text.empty() || calls.empty()) message["content"] = std::move(text);
  if (reasoned) message["reasoning_content"] = reasoning;
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  return message;
}

}  // namespace

std::variant<Json, ApiError> AnthropicMessagesToChat(const Json* system, const Json& messages) {
  Json out = Json::array();
  if (system != nullptr && !system->is_null()) {
    if (system->is_string()) {
      if (!system->get_ref<const std::string&>().empty()) out.push_back(Json{{"role", "system"}, {"content", *system}});
    } else if (system->is_array()) {
      std::variant<Json, ApiError> parts = TextParts(*system, "system", "system");
      if (auto* e = std::get_if<ApiError>(&parts)) return *e;
      if (!std::get<Json>(parts).empty()) out.push_back(Json{{"role", "system"}, {"content", std::get<Json>(parts)}});
    } else {
      return Invalid(absl::StrCat("system must be a string or an array of text blocks, got ", JsonType(*system)),
                     "system");
    }
  }
  if (!messages.is_array() || messages.empty()) {
    return Invalid("messages must be a non-empty array of messages", "messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = absl::StrCat("messages.", i);
    if (!m.is_object()) return Bad(where, absl::StrCat(" must be an object, got ", JsonType(m)), "messages");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return Bad(where, ".role must be \"user\" or \"assistant\"", "messages");
    const std::string r = role->get<std::string>();
    if (r == "system") {
      return Bad(where, ".role: unexpected role \"system\": the Messages API takes a top-level `system` parameter, "
                        "not a system message", "messages");
    }
    if (r != "user" && r != "assistant") {
      return Bad(where, absl::StrCat(".role '", r, "' is not one of user, assistant"), "messages");
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content") {
        return Bad(absl::StrCat(where, ".", key), ": Extra inputs are not permitted", "messages");
      }
    }
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) return Bad(where, ".content: Field required", "messages");
    const std::string at = where + ".content";
    if (content->is_string()) {
      out.push_back(Json{{"role", r}, {"content", *content}});
    } else if (!content->is_array()) {
      return Bad(at, absl::StrCat(" must be a string or an array of content blocks, got ", JsonType(*content)),
                 "messages");
    } else if (r == "user") {
      // No blocks would add no chat message: the turn would vanish (and a request of such turns
      // alone would have no messages). Anthropic's rule and words.
      if (content->empty()) {
        return Bad(where, ": all messages must have non-empty content except for the optional final assistant message",
                   "messages");
      }
      if (std::optional<ApiError> e = AddUserBlocks(*content, at, out)) return *e;
    } else {
      std::variant<Json, ApiError> assistant = AssistantMessage(*content, at);
      if (auto* e = std::get_if<ApiError>(&assistant)) return *e;
      out.push_back(std::get<Json>(std::move(assistant)));
    }
  }
  return out;
}

}  // namespace mlaserve::router::openai
