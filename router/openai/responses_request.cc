#include "router/openai/responses_request.h"

#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/request_limits.h"
#include "router/openai/request_reader.h"
#include "router/openai/responses_items.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// OpenAI's Responses fields this server reads (some only to refuse a value it cannot serve).
const std::set<std::string>& ResponsesKeys() {
  static const std::set<std::string> k{
      "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
      "stream_options", "store", "previous_response_id", "tools", "tool_choice",
      "parallel_tool_calls", "text", "reasoning", "metadata", "user", "safety_identifier",
      "include", "top_logprobs", "service_tier", "truncation", "prompt_cache_key",
      "prompt_cache_retention", "background", "max_tool_calls"};
  return k;
}

// OpenAI's fields for features this server does not have: accepted only when null.
const std::set<std::string>& UnservedKeys() {
  static const std::set<std::string> k{"conversation", "prompt", "background_options", "context_management",
                                       "image", "moderation", "access_programs", "prompt_cache_options"};
  return k;
}

// vLLM's extensions, which chat reads: passed to it as they are.
const std::set<std::string>& ChatExtensionKeys() {
  static const std::set<std::string> k{
      "seed", "stop", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
      "logit_bias", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "ignore_eos",
      "cache_salt", "chat_template_kwargs", "chat_template"};
  return k;
}

// Whether `v` is null or one of `allowed` (a string).
bool OneOf(const Json* v, std::initializer_list<const char*> allowed) {
  if (v == nullptr) return true;
  if (!v->is_string()) return false;
  for (const char* a : allowed) {
    if (*v == a) return true;
  }
  return false;
}

std::string Quoted(const Json& v) { return v.is_string() ? absl::StrCat("'", v.get<std::string>(), "'") : v.dump(); }

// tools: OpenAI's flat function tools, {"type": "function", "name", "description"?,
// "parameters"?, "strict"?}, as chat's {"type": "function", "function": {...}}. Built-in tools
// (web_search, file_search, mcp, ...) are 400s naming their type.
void ReadTools(RequestReader& r, ResponsesRequest* out) {
  const Json* v = r.Get("tools");
  if (v == nullptr || r.failed()) return;
  if (!v->is_array()) return r.WrongType("tools", "an array of tools", *v);
  Json chat_tools = Json::array();
  std::set<std::string> names;
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& tool = (*v)[i];
    const std::string where = absl::StrCat("tools[", i, "]");
    const auto bad = [&](const std::string& what) { r.Fail(Invalid(absl::StrCat(where, what), "tools")); };
    if (!tool.is_object()) return bad(" must be an object");
    if (!StringFieldIs(tool, "type", "function")) {
      if (tool.contains("type") && tool["type"].is_string()) {
        return bad(absl::StrCat(": tools of type '", tool["type"].get<std::string>(),
                                "' are not supported: this server serves function tools only"));
      }
      return bad(".type must be \"function\"");
    }
    Json function = Json::object();
    for (const auto& [key, value] : tool.items()) {
      if (key == "type" || value.is_null()) continue;
      if (key == "name") {
        if (!value.is_string() || !IsToolName(value.get<std::string>())) {
          return bad(absl::StrCat(".name must be 1 to 64 letters, digits, '_', '-', '.' or ':'",
                                  value.is_string() ? absl::StrCat(", got '", value.get<std::string>(), "'") : ""));
        }
      } else if (key == "description") {
        if (!value.is_string()) return bad(".description must be a string");
      } else if (key == "parameters") {
        if (!value.is_object()) return bad(".parameters must be a JSON Schema object");
      } else if (key == "strict") {
        if (!value.is_boolean()) return bad(".strict must be a boolean");
      } else {
        return bad(absl::StrCat(" has a field this server does not support: '", key,
                                "' (type, name, description, parameters, strict)"));
      }
      function[key] = value;
    }
    if (!function.contains("name")) return bad(".name is required");
    if (!names.insert(function["name"].get<std::string>()).second) {
      return bad(absl::StrCat(".name '", function["name"].get<std::string>(),
                              "' is given twice; tool names must be unique"));
    }
    chat_tools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
  }
  out->echo.tools = *v;
  out->chat_fields["tools"] = std::move(chat_tools);
}

// tool_choice: "none" / "auto" / "required" / {"type": "function", "name"}; the other kinds
// (allowed_tools, built-in tools, mcp, custom) are 400s naming them.
void ReadToolChoice(RequestReader& r, ResponsesRequest* out) {
  if (auto v = r.Bool("parallel_tool_calls")) {
    out->echo.parallel_tool_calls = *v;
    out->chat_fields["parallel_tool_calls"] = *v;
  }
  const Json* c = r.Get("tool_choice");
  if (c == nullptr || r.failed()) return;
  constexpr char kShape[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                            "\"name\": ...}";
  if (c->is_string()) {
    if (!OneOf(c, {"none", "auto", "required"})) {
      return r.Fail(Invalid(absl::StrCat(kShape, ", got ", Quoted(*c)), "tool_choice"));
    }
    out->chat_fields["tool_choice"] = *c;
  } else if (c->is_object() && StringFieldIs(*c, "type", "function")) {
    if (!c->contains("name") || !(*c)["name"].is_string()) {
      return r.Fail(Invalid("'tool_choice' {\"type\": \"function\"} needs the function's 'name'", "tool_choice"));
    }
    out->chat_fields["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
  } else if (c->is_object() && c->contains("type") && (*c)["type"].is_string()) {
    return r.Fail(Invalid(absl::StrCat("'tool_choice' of type '", (*c)["type"].get<std::string>(),
                                       "' is not supported: this server serves function tools only"),
                          "tool_choice"));
  } else {
    return r.Fail(Invalid(kShape, "tool_choice"));
  }
  out->echo.tool_choice = *c;
}

// text: {"format": {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "name",
// "schema", "strict"?, "description"?}, "verbosity"?} -> chat's response_format. Only the
// default verbosity ("medium") is served: the model writes as it writes.
void ReadText(RequestReader& r, ResponsesRequest* out) {
  const Json* v = r.Get("text");
  if (v == nullptr || r.failed()) return;
  if (!v->is_object()) return r.WrongType("text", "an object", *v);
  for (const auto& [key, value] : v->items()) {
    if (key != "format" && key != "verbosity") {
      return r.Fail(Invalid(absl::StrCat("'text' has an unknown field '", key, "' (format, verbosity)"), "text"));
    }
  }
  out->echo.text = *v;
  if (const auto verbosity = v->find("verbosity"); verbosity != v->end() && !verbosity->is_null()) {
    if (!OneOf(&*verbosity, {"low", "medium", "high"})) {
      return r.Fail(Invalid("'text.verbosity' must be \"low\", \"medium\" or \"high\"", "text.verbosity"));
    }
    if (*verbosity != "medium") {
      return r.Fail(Invalid(absl::StrCat("'text.verbosity' ", Quoted(*verbosity),
                                         " is not supported: only \"medium\" (the model's own length)"),
                            "text.verbosity"));
    }
  }
  const auto format = v->find("format");
  if (format == v->end() || format->is_null()) {
    out->echo.text["format"] = Json{{"type", "text"}};
    return;
  }
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    return r.Fail(Invalid("'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                          "{\"type\": \"json_schema\", \"name\": ..., \"schema\": ...}", "text.format"));
  }
  const std::string type = (*format)["type"].get<std::string>();
  if (type == "text" || type == "json_object") {
    out->chat_fields["response_format"] = Json{{"type", type}};
  } else if (type == "json_schema") {
    Json json_schema = Json::object();
    for (const auto& [key, value] : format->items()) {
      if (key == "type" || value.is_null()) continue;  // null: not given, as in tools
      if (key != "name" && key != "schema" && key != "strict" && key != "description") {
        return r.Fail(Invalid(absl::StrCat("'text.format' has an unknown field '", key,
                                           "' (type, name, schema, strict, description)"), "text.format"));
      }
      json_schema[key] = value;
    }
    out->chat_fields["response_format"] = Json{{"type", "json_schema"}, {"json_schema", std::move(json_schema)}};
  } else {
    r.Fail(Invalid(absl::StrCat("'text.format' type '", type, "' is not one of text, json_object, json_schema"),
                   "text.format"));
  }
}

// reasoning: {"effort", "summary"}. The effort turns the chat template's thinking switch
// (chat_template_kwargs `thinking` / `enable_thinking`, as DeepSeek-V3.1 / V3.2 and vLLM read
// them) on, or off for "none", and is passed as `reasoning_effort` for templates that read it;
// a request's own chat_template_kwargs win. Summaries are not written (the reasoning item
// carries the reasoning itself).
void ReadReasoning(RequestReader& r, ResponsesRequest* out) {
  const Json* v = r.Get("reasoning");
  if (v == nullptr || r.failed()) return;
  if (!v->is_object()) return r.WrongType("reasoning", "an object", *v);
  Json effort = nullptr;
  for (const auto& [key, value] : v->items()) {
    if (value.is_null()) continue;
    if (key == "effort") {
      if (!OneOf(&value, {"none", "minimal", "low", "medium", "high", "xhigh", "max"})) {
        return r.Fail(Invalid(absl::StrCat("'reasoning.effort' ", Quoted(value), " is not one of none, minimal, "
                                           "low, medium, high, xhigh, max"), "reasoning.effort"));
      }
      effort = value;
    } else if (key == "summary" || key == "generate_summary") {
      if (!OneOf(&value, {"auto", "concise", "detailed"})) {
        return r.Fail(Invalid(absl::StrCat("'reasoning.", key, "' must be \"auto\", \"concise\" or \"detailed\""),
                              absl::StrCat("reasoning.", key)));
      }
    } else {
      return r.Fail(Invalid(absl::StrCat("'reasoning.", key, "' is not supported (effort, summary)"),
                            absl::StrCat("reasoning.", key)));
    }
  }
  out->echo.reasoning = Json{{"effort", effort}, {"summary", v->contains("summary") ? (*v)["summary"] : Json(nullptr)}};
  if (effort.is_null()) return;
  const bool thinking = effort != "none";
  Json kwargs = Json{{"thinking", thinking}, {"enable_thinking", thinking}, {"reasoning_effort", effort}};
  if (const Json* own = r.Get("chat_template_kwargs"); own != nullptr) {
    if (!own->is_object()) return;  // chat's parser refuses it
    kwargs.update(*own);
  }
  out->chat_fields["chat_template_kwargs"] = std::move(kwargs);
}

// include and top_logprobs: the output text's logprobs (chat's logprobs / top_logprobs).
void ReadLogprobs(RequestReader& r, ResponsesRequest* out) {
  if (const Json* v = r.Get("include"); v != nullptr && !r.failed()) {
    if (!v->is_array()) return r.WrongType("include", "an array of strings", *v);
    for (const Json& item : *v) {
      if (!item.is_string()) return r.WrongType("include", "an array of strings", item);
      if (item == "message.output_text.logprobs") {
        out->logprobs = true;
      } else if (item == "reasoning.encrypted_content") {
        // Nothing is encrypted: reasoning items carry their text, and come back as text.
      } else {
        return r.Fail(Invalid(absl::StrCat("'include' value ", Quoted(item), " is not supported (message.output_text."
                                           "logprobs, reasoning.encrypted_content)"), "include"));
      }
    }
  }
  const std::optional<int32_t> top = r.Int32("top_logprobs", 0, common::kMaxTopLogprobs);
  if (top) out->echo.top_logprobs = *top;
  if (top.value_or(0) > 0) out->logprobs = true;
  if (out->logprobs) {
    out->chat_fields["logprobs"] = true;
    out->chat_fields["top_logprobs"] = top.value_or(0);
  }
}

// Fields whose only value served here is the default (or that change nothing here).
void ReadDefaultsOnly(RequestReader& r, ResponsesRequest* out) {
  if (std::optional<bool> background = r.Bool("background"); background.value_or(false)) {
    r.Fail(Invalid("'background' true is not supported: responses are generated while the request waits",
                   "background"));
  }
  if (const Json* v = r.Get("max_tool_calls"); v != nullptr && !r.failed()) {
    r.Fail(Invalid("'max_tool_calls' is not supported (parallel_tool_calls false returns one call)",
                   "max_tool_calls"));
  }
  if (const Json* v = r.Get("truncation"); !r.failed() && !OneOf(v, {"disabled"})) {
    r.Fail(Invalid(absl::StrCat("'truncation' ", v->dump(), " is not supported: only \"disabled\" (a conversation "
                                "longer than the context is refused)"), "truncation"));
  }
  if (const Json* v = r.Get("prompt_cache_retention"); !r.failed() && !OneOf(v, {"in_memory"})) {
    r.Fail(Invalid(absl::StrCat("'prompt_cache_retention' ", v->dump(), " is not supported: only \"in_memory\" (the "
                                "workers' prefix caches)"), "prompt_cache_retention"));
  }
  if (const Json* v = r.Get("service_tier"); !r.failed() && !OneOf(v, {"auto", "default"})) {
    r.Fail(Invalid(absl::StrCat("'service_tier' ", v->dump(), " is not supported: this server has one tier: use "
                                "\"auto\" or \"default\""), "service_tier"));
  }
  r.String("prompt_cache_key");   // a routing hint; the prefix cache needs none
  r.String("safety_identifier");  // as `user`: accepted, not used
  if (std::optional<std::string> user = r.String("user")) out->echo.user = *user;
  if (const Json* v = r.Get("metadata"); v != nullptr && !r.failed()) {
    bool strings = v->is_object();
    if (strings) {
      for (const auto& [key, value] : v->items()) strings = strings && value.is_string();
    }
    if (!strings) return r.WrongType("metadata", "an object of strings", *v);
    out->echo.metadata = *v;
  }
}

}  // namespace

std::variant<ResponsesRequest, ApiError> ParseResponsesRequest(const std::string& body,
                                                               const std::string& served_model) {
  std::variant<Json, ApiError> parsed = ParseRequestBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const Json& j = std::get<Json>(parsed);
  ResponsesRequest out;
  for (const auto& [key, value] : j.items()) {
    if (ChatExtensionKeys().count(key) > 0) {
      out.chat_fields[key] = value;
    } else if (UnservedKeys().count(key) > 0) {
      if (!value.is_null()) return Invalid(absl::StrCat("'", key, "' is not supported by this server"), key);
    } else if (ResponsesKeys().count(key) == 0) {
      return Invalid(absl::StrCat("unrecognized request argument supplied: ", key), key);
    }
  }
  RequestReader r(j);
  std::optional<std::string> model = r.String("model");
  if (r.failed()) return *r.error();
  if (!model) return Invalid("'model' is required", "model");
  if (*model != served_model) return ModelNotFound(*model, served_model);
  out.model = *model;
  const Json* input = r.Get("input");
  if (input == nullptr) return Invalid("'input' is required", "input");
  std::variant<Json, ApiError> items = NormalizeInputItems(*input);
  if (auto* e = std::get_if<ApiError>(&items)) return *e;
  out.input = std::get<Json>(std::move(items));
  out.instructions = r.String("instructions");
  out.previous_response_id = r.String("previous_response_id");
  out.store = r.Bool("store").value_or(true);
  out.stream = r.Bool("stream").value_or(false);
  if (const Json* so = r.Get("stream_options"); so != nullptr && !r.failed()) {
    if (!out.stream) return Invalid("'stream_options' is only allowed with \"stream\": true", "stream_options");
    if (!so->is_object()) return Invalid("'stream_options' must be an object", "stream_options");
    for (const auto& [key, value] : so->items()) {
      if (key != "include_obfuscation" || !(value.is_boolean() || value.is_null())) {
        return Invalid(absl::StrCat("'stream_options' accepts the boolean include_obfuscation, not '", key, "'"),
                       "stream_options");
      }
    }
  }
  if (std::optional<int32_t> max = r.Int32("max_output_tokens", std::numeric_limits<int32_t>::min(),
                                           std::numeric_limits<int32_t>::max())) {
    out.echo.max_output_tokens = *max;
    out.chat_fields["max_completion_tokens"] = *max;
  }
  if (std::optional<double> t = r.Number("temperature")) {
    out.echo.temperature = *t;
    out.chat_fields["temperature"] = *t;
  }
  if (std::optional<double> p = r.Number("top_p")) {
    out.echo.top_p = *p;
    out.chat_fields["top_p"] = *p;
  }
  ReadTools(r, &out);
  ReadToolChoice(r, &out);
  ReadText(r, &out);
  ReadReasoning(r, &out);
  ReadLogprobs(r, &out);
  ReadDefaultsOnly(r, &out);
  if (r.failed()) return *r.error();
  return out;
}

std::variant<ApiRequest, ApiError> ToChatRequest(const ResponsesRequest& r, const Json& history,
                                                 const std::string& served_model) {
  Json items = history;
  for (const Json& item : r.input) items.push_back(item);
  Json messages = Json::array();
  if (r.instructions.has_value()) messages.push_back(Json{{"role", "system"}, {"content", *r.instructions}});
  for (Json& m : ItemsToChatMessages(items)) messages.push_back(std::move(m));
  if (messages.empty()) {
    return Invalid("'input' has no messages to answer (an empty list, without instructions or a "
                   "previous_response_id, or only reasoning items)", "input");
  }
  Json body = r.chat_fields;
  body["model"] = r.model;
  body["messages"] = std::move(messages);
  std::variant<ApiRequest, ApiError> chat = ParseApiRequest(
      Endpoint::kChat, body.dump(-1, ' ', false, Json::error_handler_t::replace), served_model);
  if (auto* e = std::get_if<ApiError>(&chat)) return ResponsesError(*e);
  ApiRequest& a = std::get<ApiRequest>(chat);
  a.max_tokens_param = "max_output_tokens";  // the router's errors name it so (ErrorForRequest)
  return chat;
}

ApiError ResponsesError(ApiError e) {
  if (e.param.has_value()) {
    std::string& p = *e.param;
    if (p == "max_completion_tokens" || p == "max_tokens") {
      p = "max_output_tokens";
    } else if (p == "messages") {
      p = "input";
    } else if (p.starts_with("response_format.json_schema")) {
      p = absl::StrCat("text.format", p.substr(std::string_view("response_format.json_schema").size()));
    } else if (p == "response_format") {
      p = "text.format";
    }
  }
  e.message = absl::StrReplaceAll(e.message, {{"max_completion_tokens", "max_output_tokens"},
                                              {"response_format.json_schema", "text.format"},
                                              {"'response_format'", "'text.format'"}});
  return e;
}

}  // namespace mlaserve::router::openai
