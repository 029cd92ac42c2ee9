#include "router/openai/anthropic_request.h"

#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "router/openai/anthropic_messages.h"
#include "router/openai/request_reader.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// Anthropic's Messages fields this server reads (some only to refuse a value it cannot serve).
const std::set<std::string>& MessagesKeys() {
  static const std::set<std::string> k{
      "model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
      "tools", "tool_choice", "thinking", "metadata", "service_tier", "output_config", "cache_control", "speed"};
  return k;
}

// Anthropic's fields for features this server does not have: accepted only when null.
const std::set<std::string>& UnservedKeys() {
  static const std::set<std::string> k{"container", "mcp_servers", "context_management", "diagnostics",
                                       "inference_geo"};
  return k;
}

ApiError Extra(const std::string& field, const std::string& param) {
  return Invalid(absl::StrCat(field, ": Extra inputs are not permitted"), param);
}

bool OneOf(const Json& v, std::initializer_list<const char*> allowed) {
  if (!v.is_string()) return false;
  for (const char* a : allowed) {
    if (v == a) return true;
  }
  return false;
}

std::string Quoted(const Json& v) { return v.is_string() ? absl::StrCat("'", v.get<std::string>(), "'") : v.dump(); }

// tools: client tools {name, description?, input_schema, strict?, type?: "custom"} as chat's
// function tools; Anthropic's server tools (a `type` such as web_search_20250305) are refused.
void ReadTools(RequestReader& r, Json* chat) {
  const Json* v = r.Get("tools");
  if (v == nullptr || r.failed()) return;
  if (!v->is_array()) return r.WrongType("tools", "an array of tools", *v);
  Json tools = Json::array();
  std::set<std::string> names;
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& tool = (*v)[i];
    const std::string where = absl::StrCat("tools.", i);
    const auto bad = [&](const std::string& what) { r.Fail(Invalid(absl::StrCat(where, what), "tools")); };
    if (!tool.is_object()) return bad(" must be an object");
    if (const auto type = tool.find("type"); type != tool.end() && !type->is_null() && *type != "custom") {
      return bad(absl::StrCat(": tools of type ", Quoted(*type),
                              " are not supported: this server serves client tools only (no type, or \"custom\")"));
    }
    Json function = Json::object();
    for (const auto& [key, value] : tool.items()) {
      if (key == "type" || key == "cache_control" || key == "eager_input_streaming" || key == "input_examples" ||
          value.is_null()) {
        continue;  // how Anthropic caches, streams or shows a tool: nothing here changes with them
      }
      if (key == "name") {
        if (!value.is_string() || !IsToolName(value.get<std::string>())) {
          return bad(absl::StrCat(".name must be 1 to 64 letters, digits, '_', '-', '.' or ':'",
                                  value.is_string() ? absl::StrCat(", got '", value.get<std::string>(), "'") : ""));
        }
        function["name"] = value;
      } else if (key == "description") {
        if (!value.is_string()) return bad(".description must be a string");
        function["description"] = value;
      } else if (key == "input_schema") {
        if (!value.is_object()) return bad(".input_schema must be a JSON Schema object");
        function["parameters"] = value;
      } else if (key == "strict") {
        if (!value.is_boolean()) return bad(".strict must be a boolean");
        function["strict"] = value;
      } else if (key == "defer_loading") {
        if (value != false) return bad(".defer_loading true is not supported: this server has no tool search");
      } else if (key == "allowed_callers") {
        if (value != Json::array({"direct"})) {
          return bad(absl::StrCat(".allowed_callers ", value.dump(), " is not supported: only [\"direct\"]"));
        }
      } else {
        return r.Fail(Extra(absl::StrCat(where, ".", key), "tools"));
      }
    }
    if (!function.contains("name")) return bad(".name: Field required");
    if (!function.contains("parameters")) return bad(".input_schema: Field required");
    if (!names.insert(function["name"].get<std::string>()).second) {
      return bad(absl::StrCat(".name '", function["name"].get<std::string>(), "' is given twice; tool names must be unique"));
    }
    tools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
  }
  (*chat)["tools"] = std::move(tools);
}

// tool_choice {"type": "auto" | "any" | "tool" | "none", "name" (tool), "disable_parallel_tool_use"}.
void ReadToolChoice(RequestReader& r, Json* chat) {
  const Json* c = r.Get("tool_choice");
  if (c == nullptr || r.failed()) return;
  constexpr char kShape[] = "tool_choice must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"} (\"tool\" with "
                            "the tool's \"name\")";
  if (!c->is_object() || !c->contains("type") || !(*c)["type"].is_string()) {
    return r.Fail(Invalid(kShape, "tool_choice"));
  }
  const std::string type = (*c)["type"].get<std::string>();
  for (const auto& [key, value] : c->items()) {
    const bool known = key == "type" || (key == "name" && type == "tool") ||
                       (key == "disable_parallel_tool_use" && type != "none");
    if (!known) return r.Fail(Extra(absl::StrCat("tool_choice.", key), "tool_choice"));
  }
  const Json* tools = chat->contains("tools") ? &(*chat)["tools"] : nullptr;
  if (type == "auto" || type == "none") {
    (*chat)["tool_choice"] = type;
  } else if (type == "any") {
    if (tools == nullptr || tools->empty()) return r.Fail(Invalid("tool_choice \"any\" needs tools", "tool_choice"));
    (*chat)["tool_choice"] = "required";
  } else if (type == "tool") {
    const auto name = c->find("name");
    if (name == c->end() || !name->is_string()) return r.Fail(Invalid("tool_choice.name: Field required", "tool_choice"));
    bool known = false;
    for (const Json& t : tools != nullptr ? *tools : Json::array()) known = known || t["function"]["name"] == *name;
    if (!known) {
      return r.Fail(Invalid(absl::StrCat("tool_choice names the tool '", name->get<std::string>(),
                                         "', which is not in tools"), "tool_choice"));
    }
    (*chat)["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return r.Fail(Invalid(absl::StrCat(kShape, ", got type '", type, "'"), "tool_choice"));
  }
  if (const auto d = c->find("disable_parallel_tool_use"); d != c->end() && !d->is_null()) {
    if (!d->is_boolean()) return r.Fail(Invalid("tool_choice.disable_parallel_tool_use must be a boolean", "tool_choice"));
    if (d->get<bool>()) (*chat)["parallel_tool_calls"] = false;
  }
}

// thinking and output_config.effort -> the chat template's kwargs, as chat_template_kwargs sets
// them: `thinking` / `enable_thinking` (DeepSeek-V3.1 / V3.2 and vLLM's switch) and
// `reasoning_effort`.
void ReadThinking(RequestReader& r, std::optional<int32_t> max_tokens, Json* kwargs) {
  const Json* t = r.Get("thinking");
  if (t == nullptr || r.failed()) return;
  if (!t->is_object() || !t->contains("type") || !(*t)["type"].is_string()) {
    return r.Fail(Invalid("thinking must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"} "
                          "or {\"type\": \"disabled\"}", "thinking"));
  }
  const std::string type = (*t)["type"].get<std::string>();
  if (type != "enabled" && type != "adaptive" && type != "disabled") {
    return r.Fail(Invalid(absl::StrCat("thinking.type '", type, "' is not supported (enabled, adaptive, disabled)"),
                          "thinking"));
  }
  for (const auto& [key, value] : t->items()) {
    if (key == "type") continue;
    if (key == "budget_tokens" && type == "enabled") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1024) {
        return r.Fail(Invalid(absl::StrCat("thinking.budget_tokens is ", value.dump(), "; it must be an integer >= 1024"),
                              "thinking"));
      }
      if (max_tokens && value.get<int64_t>() >= *max_tokens) {
        return r.Fail(Invalid(absl::StrCat("max_tokens (", *max_tokens, ") must be greater than thinking.budget_tokens (",
                                           value.get<int64_t>(), ")"), "thinking"));
      }
    } else if (key == "display" && type != "disabled") {
      if (!value.is_null() && value != "summarized") {
        return r.Fail(Invalid(absl::StrCat("thinking.display ", Quoted(value),
                                           " is not supported: the thinking is returned as written (\"summarized\")"),
                              "thinking"));
      }
    } else {
      return r.Fail(Extra(absl::StrCat("thinking.", key), "thinking"));
    }
  }
  if (type == "enabled" && !t->contains("budget_tokens")) {
    return r.Fail(Invalid("thinking.budget_tokens: Field required", "thinking"));
  }
  const bool on = type != "disabled";
  (*kwargs)["thinking"] = on;
  (*kwargs)["enable_thinking"] = on;
}

// output_config {"format": {"type": "json_schema", "schema"}, "effort"}.
void ReadOutputConfig(RequestReader& r, Json* chat, Json* kwargs) {
  const Json* v = r.Get("output_config");
  if (v == nullptr || r.failed()) return;
  if (!v->is_object()) return r.WrongType("output_config", "an object", *v);
  for (const auto& [key, value] : v->items()) {
    if (value.is_null()) continue;
    if (key == "effort") {
      if (!OneOf(value, {"low", "medium", "high", "xhigh", "max"})) {
        return r.Fail(Invalid(absl::StrCat("output_config.effort ", Quoted(value),
                                           " is not one of low, medium, high, xhigh, max"), "output_config"));
      }
      (*kwargs)["reasoning_effort"] = value;
    } else if (key == "format") {
      if (!value.is_object() || !StringFieldIs(value, "type", "json_schema") || !value.contains("schema")) {
        return r.Fail(Invalid("output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}",
                              "output_config.format"));
      }
      for (const auto& [k, unused] : value.items()) {
        if (k != "type" && k != "schema") return r.Fail(Extra(absl::StrCat("output_config.format.", k), "output_config"));
      }
      (*chat)["response_format"] = Json{
          {"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", value["schema"]}, {"strict", true}}}};
    } else {
      return r.Fail(Extra(absl::StrCat("output_config.", key), "output_config"));
    }
  }
}

// Fields that change nothing here, read for their shapes; values this server cannot honour refused.
void ReadAccepted(RequestReader& r, Json* chat) {
  if (const Json* m = r.Get("metadata"); m != nullptr && !r.failed()) {
    if (!m->is_object()) return r.WrongType("metadata", "an object", *m);
    for (const auto& [key, value] : m->items()) {
      if (key != "user_id") return r.Fail(Extra(absl::StrCat("metadata.", key), "metadata"));
      if (!value.is_null() && !value.is_string()) return r.Fail(Invalid("metadata.user_id must be a string", "metadata"));
      if (value.is_string()) (*chat)["user"] = value;
    }
  }
  if (const Json* v = r.Get("service_tier"); v != nullptr && !r.failed() && !OneOf(*v, {"auto", "standard_only"})) {
    return r.Fail(Invalid(absl::StrCat("service_tier ", v->dump(), " is not one of auto, standard_only"),
                          "service_tier"));
  }
  if (const Json* v = r.Get("speed"); v != nullptr && !r.failed() && *v != "standard") {
    return r.Fail(Invalid(absl::StrCat("speed ", v->dump(), " is not supported: this server has one speed (\"standard\")"),
                          "speed"));
  }
  // The prefix cache needs no breakpoints: every prompt's pages are cached.
  if (const Json* v = r.Get("cache_control"); v != nullptr && !r.failed() && !v->is_object()) {
    return r.WrongType("cache_control", "an object", *v);
  }
}

}  // namespace

std::variant<AnthropicRequest, ApiError> ParseAnthropicRequest(const std::string& body, const std::string& served_model,
                                                               AnthropicRoute route) {
  std::variant<Json, ApiError> parsed = ParseRequestBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const Json& j = std::get<Json>(parsed);
  for (const auto& [key, value] : j.items()) {
    if (UnservedKeys().count(key) > 0) {
      if (!value.is_null()) return Invalid(absl::StrCat(key, ": not supported by this server"), key);
    } else if (MessagesKeys().count(key) == 0) {
      return Extra(key, key);
    }
  }
  RequestReader r(j);
  AnthropicRequest out;
  std::optional<std::string> model = r.String("model");
  if (r.failed()) return *r.error();
  if (!model) return Invalid("model: Field required", "model");
  if (*model != served_model) return ModelNotFound(*model, served_model);
  out.model = *model;
  Json& chat = out.chat_body;
  chat["model"] = *model;
  const std::optional<int32_t> max_tokens = r.Int32("max_tokens", 1, std::numeric_limits<int32_t>::max());
  if (r.failed()) return *r.error();
  if (max_tokens) {
    chat["max_tokens"] = *max_tokens;
  } else if (route == AnthropicRoute::kMessages) {
    return Invalid("max_tokens: Field required", "max_tokens");
  }
  const Json* messages = r.Get("messages");
  if (messages == nullptr) return Invalid("messages: Field required", "messages");
  std::variant<Json, ApiError> chat_messages = AnthropicMessagesToChat(r.Get("system"), *messages);
  if (auto* e = std::get_if<ApiError>(&chat_messages)) return *e;
  chat["messages"] = std::get<Json>(std::move(chat_messages));
  // A final assistant message is a prefill: the answer continues it, as Anthropic's does.
  if (chat["messages"].back()["role"] == "assistant") {
    chat["add_generation_prompt"] = false;
    chat["continue_final_message"] = true;
  }
  out.stream = r.Bool("stream").value_or(false);
  if (std::optional<double> t = r.Number("temperature")) {
    if (*t < 0 || *t > 1) return Invalid(absl::StrCat("temperature is ", *t, "; it must be in [0, 1]"), "temperature");
    chat["temperature"] = *t;
  }
  if (std::optional<double> p = r.Number("top_p")) chat["top_p"] = *p;
  if (std::optional<int64_t> k = r.Integer("top_k")) chat["top_k"] = *k;
  if (const Json* stop = r.Get("stop_sequences"); stop != nullptr && !r.failed()) {
    if (!stop->is_array()) return Invalid("stop_sequences must be an array of strings", "stop_sequences");
    for (const Json& s : *stop) {
      if (!s.is_string()) return Invalid("stop_sequences must be an array of strings", "stop_sequences");
    }
    if (!stop->empty()) chat["stop"] = *stop;
  }
  ReadTools(r, &chat);
  ReadToolChoice(r, &chat);
  Json kwargs = Json::object();
  ReadThinking(r, max_tokens, &kwargs);
  ReadOutputConfig(r, &chat, &kwargs);
  if (!kwargs.empty()) chat["chat_template_kwargs"] = std::move(kwargs);
  ReadAccepted(r, &chat);
  if (r.failed()) return *r.error();
  return out;
}

std::variant<ApiRequest, ApiError> AnthropicToChat(const AnthropicRequest& r, const std::string& served_model) {
  std::variant<ApiRequest, ApiError> chat = ParseApiRequest(
      Endpoint::kChat, r.chat_body.dump(-1, ' ', false, Json::error_handler_t::replace), served_model);
  if (auto* e = std::get_if<ApiError>(&chat)) return AnthropicParamNames(*e);
  return chat;
}

ApiError AnthropicParamNames(ApiError e) {
  if (e.param.has_value()) {
    std::string& p = *e.param;
    if (p == "stop") {
      p = "stop_sequences";
    } else if (p.starts_with("response_format.json_schema")) {
      p = absl::StrCat("output_config.format", p.substr(std::string_view("response_format.json_schema").size()));
    } else if (p == "response_format") {
      p = "output_config.format";
    } else if (p == "chat_template_kwargs") {
      p = "thinking";
    } else if (p == "continue_final_message") {
      p = "messages";
    } else if (p == "user") {
      p = "metadata.user_id";
    }
  }
  e.message = absl::StrReplaceAll(e.message, {{"'response_format'", "'output_config.format'"},
                                              {"response_format.json_schema", "output_config.format"},
                                              {"'stop'", "'stop_sequences'"}});
  return e;
}

}  // namespace mlaserve::router::openai
