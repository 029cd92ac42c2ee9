#include "router/openai/api_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "common/request_limits.h"
#include "router/chat_template/value.h"
#include "router/openai/request_reader.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

const std::set<std::string>& CommonKeys() {
  static const std::set<std::string> k{
      "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "n", "stop",
      "seed", "user", "logprobs", "presence_penalty", "frequency_penalty", "logit_bias",
      // vLLM's extensions, with vLLM's names.
      "top_k", "min_p", "repetition_penalty", "ignore_eos", "skip_special_tokens",
      "stop_token_ids", "include_stop_str_in_output", "cache_salt", "prompt_logprobs"};
  return k;
}
const std::set<std::string>& CompletionKeys() {
  static const std::set<std::string> k{"prompt", "echo", "suffix", "best_of"};
  return k;
}
const std::set<std::string>& ChatKeys() {
  static const std::set<std::string> k{
      "messages", "max_completion_tokens", "top_logprobs", "response_format", "tools",
      "tool_choice", "parallel_tool_calls", "add_generation_prompt", "continue_final_message",
      "chat_template", "chat_template_kwargs",
      // Chat parameters that change nothing here when off (store, metadata, service_tier),
      // and the deprecated spelling of tools.
      "store", "metadata", "service_tier", "functions", "function_call"};
  return k;
}

// OpenAI's log-probability parameters -> SamplingParams.logprobs (the number of alternatives):
// completions' `logprobs: int`; chat's `logprobs: bool` with `top_logprobs: int`, which needs
// logprobs true (as OpenAI and vLLM). Completions' echo with logprobs covers the prompt too.
void ReadLogprobs(RequestReader& r, Endpoint endpoint, ApiRequest* out) {
  constexpr int64_t kMax = common::kMaxTopLogprobs;
  v1::SamplingParams* s = &out->sampling;
  if (endpoint == Endpoint::kCompletions) {
    std::optional<int32_t> n = r.Int32("logprobs", 0, kMax);
    if (!n) return;
    s->set_logprobs(*n);
    out->echo_logprobs = out->echo;
    return;
  }
  const std::optional<bool> on = r.Bool("logprobs");
  const std::optional<int32_t> top = r.Int32("top_logprobs", 0, kMax);
  if (r.failed()) return;
  if (top && !on.value_or(false)) {
    return r.Fail(Invalid(absl::StrCat("'top_logprobs' is ", *top, "; it needs 'logprobs': true"),
                          "top_logprobs"));
  }
  if (on.value_or(false)) s->set_logprobs(top.value_or(0));
}

// vLLM's prompt_logprobs (both endpoints), and what the prompt's scoring asks of the engine:
// SamplingParams.prompt_logprobs, the most alternatives either the parameter or an echo with
// logprobs wants. vLLM's -1 (the whole vocabulary) is refused, as above 20; so is a positive
// value with stream (vLLM's rule: its streamed chunks carry none). Echo with max_tokens 0 is
// the prompt alone (ApiRequest::prompt_only): one token is generated to get there.
void ReadPromptLogprobs(RequestReader& r, ApiRequest* out) {
  v1::SamplingParams* s = &out->sampling;
  if (const nlohmann::ordered_json* v = r.Get("prompt_logprobs");
      v != nullptr && v->is_number_integer() && v->get<int64_t>() == -1) {
    return r.Fail(Invalid("'prompt_logprobs' is -1 (the whole vocabulary), which is not "
                          "supported; it must be in [0, 20]", "prompt_logprobs"));
  }
  out->prompt_logprobs = r.Int32("prompt_logprobs", 0, common::kMaxTopLogprobs);
  if (r.failed()) return;
  if (out->prompt_logprobs && out->stream && *out->prompt_logprobs > 0) {
    return r.Fail(Invalid("'prompt_logprobs' is not available with \"stream\": true (streamed "
                          "chunks carry none); use stream false, or echo with logprobs on "
                          "/v1/completions", "prompt_logprobs"));
  }
  if (out->prompt_logprobs && out->stream) out->prompt_logprobs.reset();  // 0: nothing to carry
  int32_t wanted = out->prompt_logprobs.value_or(-1);
  if (out->echo_logprobs) wanted = std::max(wanted, s->logprobs());
  if (wanted >= 0) s->set_prompt_logprobs(wanted);
  if (out->echo && s->has_max_new_tokens() && s->max_new_tokens() == 0) {
    out->prompt_only = true;
    s->set_max_new_tokens(1);
  }
}

// logit_bias: {"token id": bias}; the ids and ranges are checked by the router's Generate path.
void ReadLogitBias(RequestReader& r, v1::SamplingParams* s) {
  const Json* v = r.Get("logit_bias");
  if (v == nullptr || r.failed()) return;
  if (!v->is_object()) return r.WrongType("logit_bias", "an object of token id -> number", *v);
  for (const auto& [key, bias] : v->items()) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(key, &id) || id < std::numeric_limits<int32_t>::min() ||
        id > std::numeric_limits<int32_t>::max()) {
      return r.Fail(Invalid(absl::StrCat("'logit_bias' key '", key, "' is not a token id"),
                            "logit_bias"));
    }
    if (!bias.is_number()) {
      return r.Fail(Invalid(absl::StrCat("'logit_bias' value for token id ", id, " must be a "
                                         "number, got ", JsonType(bias)), "logit_bias"));
    }
    (*s->mutable_logit_bias())[static_cast<int32_t>(id)] = static_cast<float>(bias.get<double>());
  }
}

// Parameters OpenAI has whose only value this engine honours is "off".
void RequireOff(RequestReader& r, Endpoint endpoint) {
  if (endpoint == Endpoint::kCompletions) {
    if (r.Get("suffix") != nullptr) r.Fail(Invalid("'suffix' is not supported", "suffix"));
    if (const Json* v = r.Get("best_of"); v != nullptr && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
      r.Fail(Invalid("'best_of' must be 1", "best_of"));
    }
  } else {
    // The deprecated spelling of tools; its replacement is served.
    if (const Json* v = r.Get("functions"); v != nullptr && !(v->is_array() && v->empty())) {
      r.Fail(Invalid("'functions' is deprecated and not supported: use 'tools'", "functions"));
    }
    if (const Json* v = r.Get("function_call");
        v != nullptr && !(v->is_string() && v->get<std::string>() == "none")) {
      r.Fail(Invalid("'function_call' is deprecated and not supported: use 'tool_choice'",
                     "function_call"));
    }
    // OpenAI keeps a completion for its dashboard with store: true; nothing here keeps one.
    if (std::optional<bool> store = r.Bool("store"); store && *store) {
      r.Fail(Invalid("'store' true is not supported: this server does not keep completions",
                     "store"));
    }
    if (const Json* v = r.Get("metadata"); v != nullptr && !r.failed()) {
      bool strings = v->is_object();
      if (strings) {
        for (const auto& [key, value] : v->items()) strings = strings && value.is_string();
      }
      if (!strings) r.WrongType("metadata", "an object of strings", *v);
    }
    if (std::optional<std::string> tier = r.String("service_tier");
        tier && *tier != "auto" && *tier != "default") {
      r.Fail(Invalid(absl::StrCat("'service_tier' is '", *tier,
                                  "'; this server has one tier: use \"auto\" or \"default\""),
                     "service_tier"));
    }
  }
}

void ReadSampling(RequestReader& r, Endpoint endpoint, v1::SamplingParams* s,
                  std::string& max_tokens_param) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  std::optional<int32_t> max_tokens = r.Int32("max_tokens", std::numeric_limits<int32_t>::min(), kInt32Max);
  if (endpoint == Endpoint::kChat) {
    if (r.Get("max_completion_tokens") != nullptr) max_tokens_param = "max_completion_tokens";
    if (auto m = r.Int32("max_completion_tokens", std::numeric_limits<int32_t>::min(), kInt32Max)) max_tokens = m;
  }
  if (max_tokens) {
    s->set_max_new_tokens(*max_tokens);
  } else if (endpoint == Endpoint::kCompletions) {
    // OpenAI documents 16 for completions; chat has no default bound (HttpApi fills in what
    // the context leaves once the rendered prompt's length is known).
    s->set_max_new_tokens(kCompletionsDefaultMaxTokens);
  }
  if (auto v = r.Number("temperature")) s->set_temperature(static_cast<float>(*v));
  if (auto v = r.Number("top_p")) s->set_top_p(static_cast<float>(*v));
  if (auto v = r.Int32("top_k", std::numeric_limits<int32_t>::min(), kInt32Max)) s->set_top_k(*v);
  if (auto v = r.Number("min_p")) s->set_min_p(static_cast<float>(*v));
  if (auto v = r.Number("repetition_penalty")) s->set_repetition_penalty(static_cast<float>(*v));
  if (auto v = r.Number("presence_penalty")) s->set_presence_penalty(static_cast<float>(*v));
  if (auto v = r.Number("frequency_penalty")) s->set_frequency_penalty(static_cast<float>(*v));
  ReadLogitBias(r, s);
  if (auto v = r.Integer("seed")) {
    if (*v < 0) {
      r.Fail(Invalid(absl::StrCat("'seed' is ", *v, "; it must be >= 0"), "seed"));
    } else {
      s->set_seed(static_cast<uint64_t>(*v));
    }
  }
  if (auto v = r.Bool("ignore_eos")) s->set_ignore_eos(*v);
  if (auto v = r.Bool("skip_special_tokens")) s->set_skip_special_tokens(*v);
  if (auto v = r.Bool("include_stop_str_in_output")) s->set_include_stop_str_in_output(*v);
  if (const Json* stop = r.Get("stop"); stop != nullptr && !r.failed()) {
    if (stop->is_string()) {
      s->add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& item : *stop) {
        if (!item.is_string()) return r.WrongType("stop", "a string or an array of strings", item);
        s->add_stop(item.get<std::string>());
      }
    } else {
      r.WrongType("stop", "a string or an array of strings", *stop);
    }
  }
  if (const Json* ids = r.Get("stop_token_ids"); ids != nullptr && !r.failed()) {
    if (!ids->is_array()) return r.WrongType("stop_token_ids", "an array of integers", *ids);
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
          id.get<int64_t>() > kInt32Max) {
        return r.WrongType("stop_token_ids", "an array of integers", id);
      }
      s->add_stop_token_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
}

// OpenAI's prompt forms: a string, an array of token ids, an array of strings, or an array of
// token-id arrays (the last two: one prompt each).
void ReadPrompt(RequestReader& r, ApiRequest* out) {
  const Json* p = r.Get("prompt");
  if (p == nullptr) return r.Fail(Invalid("'prompt' is required", "prompt"));
  const auto token_ids = [&](const Json& array) -> bool {
    ApiRequest::Prompt prompt;
    for (const Json& id : array) {
      if (!id.is_number_integer() || id.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        r.WrongType("prompt", "a string, an array of token ids, or an array of either", id);
        return false;
      }
      prompt.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    out->prompts.push_back(std::move(prompt));
    return true;
  };
  if (p->is_string()) {
    out->prompts.push_back({p->get<std::string>(), {}});
    return;
  }
  if (!p->is_array() || p->empty()) {
    return r.WrongType("prompt", "a string, an array of token ids, or an array of either", *p);
  }
  if (p->front().is_number_integer()) {
    token_ids(*p);
    return;
  }
  for (const Json& item : *p) {
    if (item.is_string()) {
      out->prompts.push_back({item.get<std::string>(), {}});
    } else if (item.is_array() && !item.empty()) {
      if (!token_ids(item)) return;
    } else {
      return r.WrongType("prompt", "a string, an array of token ids, or an array of either", item);
    }
  }
}

// An assistant message's tool_calls as DeepSeek's templates can render them: OpenAI allows
// the message without `content` when it has calls (null here), a null or empty `tool_calls`
// (dropped: R1's template would render an empty call block), and clients send `arguments` as
// an object as well as the JSON text OpenAI specifies (written as Python's json.dumps would,
// as transformers' templates see it). False after a 400 naming the call.
bool NormalizeToolCalls(RequestReader& r, const std::string& where, Json& msg) {
  const auto calls = msg.find("tool_calls");
  if (calls == msg.end()) return true;
  if (calls->is_null() || (calls->is_array() && calls->empty())) {
    msg.erase("tool_calls");
    return true;
  }
  if (!StringFieldIs(msg, "role", "assistant") || !calls->is_array()) {
    r.Fail(Invalid(absl::StrCat(where, ".tool_calls must be an array, on an assistant message"), "messages"));
    return false;
  }
  // (Adding a key may move the others: index tool_calls afresh.)
  if (!msg.contains("content")) msg["content"] = nullptr;
  Json& list = msg["tool_calls"];
  for (size_t j = 0; j < list.size(); ++j) {
    Json& call = list[j];
    const std::string at = absl::StrCat(where, ".tool_calls[", j, "]");
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
        !call["function"].contains("name") || !call["function"]["name"].is_string()) {
      r.Fail(Invalid(absl::StrCat(at, " must be {\"type\": \"function\", \"function\": {\"name\", "
                                  "\"arguments\"}}"), "messages"));
      return false;
    }
    if (!call.contains("type")) call["type"] = "function";
    Json& arguments = call["function"]["arguments"];
    if (arguments.is_null()) {
      arguments = "{}";
    } else if (arguments.is_object()) {
      arguments = chat_template::PythonJson(arguments);
    } else if (!arguments.is_string()) {
      r.Fail(Invalid(absl::StrCat(at, ".function.arguments must be a JSON object or its text, got ",
                                  JsonType(arguments)), "messages"));
      return false;
    }
  }
  return true;
}

void ReadMessages(RequestReader& r, ApiRequest* out) {
  const Json* m = r.Get("messages");
  if (m == nullptr) return r.Fail(Invalid("'messages' is required", "messages"));
  if (!m->is_array() || m->empty()) {
    return r.Fail(Invalid("'messages' must be a non-empty array of messages", "messages"));
  }
  out->messages = Json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& msg = (*m)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return r.Fail(Invalid(absl::StrCat(where, " must be an object"), "messages"));
    if (!msg.contains("role") || !msg["role"].is_string()) {
      return r.Fail(Invalid(absl::StrCat(where, ".role must be a string"), "messages"));
    }
    Json copy = msg;
    if (msg.contains("content") && msg["content"].is_array()) {
      // Text parts joined by newlines, as vLLM gives them to string-content templates.
      std::vector<std::string> texts;
      for (const Json& part : msg["content"]) {
        if (!part.is_object() || !StringFieldIs(part, "type", "text") || !part.contains("text") ||
            !part["text"].is_string()) {
          return r.Fail(Invalid(absl::StrCat(where, ".content: only {\"type\": \"text\", \"text\": "
                                             "...} parts are supported"), "messages"));
        }
        texts.push_back(part["text"].get<std::string>());
      }
      copy["content"] = absl::StrJoin(texts, "\n");
    } else if (msg.contains("content") && !msg["content"].is_string() && !msg["content"].is_null()) {
      return r.Fail(Invalid(absl::StrCat(where, ".content must be a string, an array of text parts or "
                                         "null"), "messages"));
    }
    if (!NormalizeToolCalls(r, where, copy)) return;
    out->messages.push_back(std::move(copy));
  }
  if (auto v = r.Bool("add_generation_prompt")) out->add_generation_prompt = *v;
  if (auto v = r.Bool("continue_final_message")) out->continue_final_message = *v;
  if (r.failed()) return;
  // vLLM's rule: the generation prompt would open a new turn after the message to continue.
  // add_generation_prompt defaults to true, so it has to be turned off explicitly.
  if (out->continue_final_message && out->add_generation_prompt) {
    return r.Fail(Invalid("Cannot set both 'continue_final_message' and 'add_generation_prompt' to true "
                          "('add_generation_prompt' defaults to true): set 'add_generation_prompt' to "
                          "false to continue the final message",
                          "continue_final_message"));
  }
  if (const Json* kw = r.Get("chat_template_kwargs"); kw != nullptr && !r.failed()) {
    if (!kw->is_object()) return r.WrongType("chat_template_kwargs", "an object", *kw);
    out->chat_template_kwargs = *kw;
  }
  out->chat_template = r.String("chat_template");
}

// OpenAI's response_format: {"type": "text"} (the default), {"type": "json_object"} (JSON
// mode: the workers constrain the sampling to one JSON object) or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"?, "description"?}} (structured outputs: one JSON
// value the schema admits; the schema is compiled in validation, whose errors name the keyword
// and its pointer). `name` is required as OpenAI requires it (^[a-zA-Z0-9_-]{1,64}$); the object
// is kept in out->response_format for the chat formats that render it (DeepSeek-V3.2's).
void ReadResponseFormat(RequestReader& r, ApiRequest* out) {
  v1::SamplingParams* s = &out->sampling;
  const Json* v = r.Get("response_format");
  if (v == nullptr || r.failed()) return;
  constexpr char kShape[] =
      "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
      "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": ...}}";
  if (!v->is_object() || !v->contains("type") || !(*v)["type"].is_string()) {
    return r.Fail(Invalid(kShape, "response_format"));
  }
  const std::string type = (*v)["type"].get<std::string>();
  if (type == "json_object") {
    s->set_response_format(v1::RESPONSE_FORMAT_JSON_OBJECT);
  } else if (type == "json_schema") {
    constexpr char kParam[] = "response_format.json_schema";
    for (const auto& [key, value] : v->items()) {
      if (key != "type" && key != "json_schema") {
        return r.Fail(Invalid(absl::StrCat("'response_format' has an unknown field '", key,
                                           "' (type, json_schema; strict goes in json_schema)"),
                              "response_format"));
      }
    }
    const auto it = v->find("json_schema");
    if (it == v->end() || !it->is_object()) {
      return r.Fail(Invalid("'response_format' json_schema needs a 'json_schema' object "
                            "{\"name\": ..., \"schema\": ...}", kParam));
    }
    for (const auto& [key, value] : it->items()) {
      if (key != "name" && key != "schema" && key != "strict" && key != "description") {
        return r.Fail(Invalid(absl::StrCat("'response_format.json_schema' has an unknown field '",
                                           key, "' (name, schema, strict, description)"), kParam));
      }
    }
    const auto name = it->find("name");
    const std::string name_text = name != it->end() && name->is_string() ? name->get<std::string>() : "";
    const bool name_ok = !name_text.empty() && name_text.size() <= 64 &&
                         std::all_of(name_text.begin(), name_text.end(), [](char c) {
                           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                                  c == '-';
                         });
    if (!name_ok) {
      return r.Fail(Invalid("'response_format.json_schema.name' is required: 1 to 64 of "
                            "a-z, A-Z, 0-9, '_' and '-'", "response_format.json_schema.name"));
    }
    const auto schema = it->find("schema");
    if (schema == it->end() || !(schema->is_object() || schema->is_boolean())) {
      return r.Fail(Invalid("'response_format.json_schema.schema' must be a JSON Schema (an "
                            "object)", "response_format.json_schema.schema"));
    }
    bool strict = false;
    if (const auto st = it->find("strict"); st != it->end() && !st->is_null()) {
      if (!st->is_boolean()) {
        return r.Fail(Invalid("'response_format.json_schema.strict' must be a boolean",
                              "response_format.json_schema.strict"));
      }
      strict = st->get<bool>();
    }
    if (const auto d = it->find("description"); d != it->end() && !d->is_string()) {
      return r.Fail(Invalid("'response_format.json_schema.description' must be a string",
                            "response_format.json_schema.description"));
    }
    s->set_response_format(v1::RESPONSE_FORMAT_JSON_SCHEMA);
    s->set_response_format_schema(schema->dump());
    s->set_response_format_schema_strict(strict);
    out->response_format = *v;
  } else if (type != "text") {
    r.Fail(Invalid(absl::StrCat(kShape, ", got type \"", type, "\""), "response_format"));
  }
}

// OpenAI's tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}}], names unique (a call names its function); tool_choice "none" / "auto" /
// "required" / {"type": "function", "function": {"name"}}, which must name one of them.
void ReadTools(RequestReader& r, ApiRequest* out) {
  if (const Json* v = r.Get("tools"); v != nullptr && !r.failed()) {
    if (!v->is_array()) return r.WrongType("tools", "an array of tools", *v);
    std::set<std::string> names;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& tool = (*v)[i];
      const std::string where = absl::StrCat("tools[", i, "]");
      const auto bad = [&](const std::string& what) { r.Fail(Invalid(absl::StrCat(where, what), "tools")); };
      if (!tool.is_object()) return bad(" must be an object");
      if (!StringFieldIs(tool, "type", "function")) return bad(".type must be \"function\"");
      for (const auto& [key, value] : tool.items()) {
        if (key != "type" && key != "function") return bad(absl::StrCat(" has an unknown field '", key, "'"));
      }
      const auto f = tool.find("function");
      if (f == tool.end() || !f->is_object()) return bad(".function must be an object");
      for (const auto& [key, value] : f->items()) {
        if (key == "name") {
          if (!value.is_string() || !IsToolName(value.get<std::string>())) {
            return bad(absl::StrCat(".function.name must be 1 to 64 letters, digits, '_', '-', '.' or ':'",
                                    value.is_string() ? absl::StrCat(", got '", value.get<std::string>(), "'") : ""));
          }
        } else if (key == "description") {
          if (!value.is_string() && !value.is_null()) return bad(".function.description must be a string");
        } else if (key == "parameters") {
          if (!value.is_object() && !value.is_null()) return bad(".function.parameters must be a JSON Schema object");
        } else if (key == "strict") {
          if (!value.is_boolean() && !value.is_null()) return bad(".function.strict must be a boolean");
        } else {
          return bad(absl::StrCat(".function has an unknown field '", key, "'"));
        }
      }
      if (!f->contains("name")) return bad(".function.name is required");
      if (!names.insert((*f)["name"].get<std::string>()).second) {
        return bad(absl::StrCat(".function.name '", (*f)["name"].get<std::string>(),
                                "' is given twice; tool names must be unique"));
      }
    }
    out->tools = *v;
  }
  if (auto v = r.Bool("parallel_tool_calls")) out->parallel_tool_calls = *v;
  using ToolChoice = ApiRequest::ToolChoice;
  out->tool_choice = out->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  const Json* choice = r.Get("tool_choice");
  if (choice == nullptr || r.failed()) return;
  constexpr char kShape[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                            "\"function\", \"function\": {\"name\": ...}}";
  if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "none") {
      out->tool_choice = ToolChoice::kNone;
    } else if (mode == "auto") {
      out->tool_choice = out->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
    } else if (mode == "required") {
      out->tool_choice = ToolChoice::kRequired;
    } else {
      return r.Fail(Invalid(absl::StrCat(kShape, ", got \"", mode, "\""), "tool_choice"));
    }
  } else if (choice->is_object() && StringFieldIs(*choice, "type", "function") && choice->contains("function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
             (*choice)["function"]["name"].is_string()) {
    out->tool_choice = ToolChoice::kNamed;
    out->tool_name = (*choice)["function"]["name"].get<std::string>();
  } else {
    return r.Fail(Invalid(kShape, "tool_choice"));
  }
  if (out->tool_choice == ToolChoice::kRequired && out->tools.empty()) {
    return r.Fail(Invalid("'tool_choice' \"required\" needs 'tools'", "tool_choice"));
  }
  if (out->tool_choice == ToolChoice::kNamed) {
    const bool known = std::any_of(out->tools.begin(), out->tools.end(), [&](const Json& t) {
      return t["function"]["name"] == out->tool_name;
    });
    if (!known) {
      return r.Fail(Invalid(absl::StrCat("'tool_choice' names the function '", out->tool_name,
                                         "', which is not in 'tools'"), "tool_choice"));
    }
  }
}

}  // namespace

nlohmann::ordered_json ErrorBody(const ApiError& e) {
  Json error = Json::object();
  error["message"] = e.message;
  error["type"] = e.type;
  error["param"] = e.param ? Json(*e.param) : Json(nullptr);
  error["code"] = e.code ? Json(*e.code) : Json(nullptr);
  return Json{{"error", std::move(error)}};
}

ApiError ErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  std::string code = absl::StatusCodeToString(status.code());
  for (char& c : code) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  e.code = code;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: e.http_status = 400; break;
    case absl::StatusCode::kNotFound: e.http_status = 404; break;
    case absl::StatusCode::kAlreadyExists: e.http_status = 409; break;
    case absl::StatusCode::kUnauthenticated: e.http_status = 401; e.type = "authentication_error"; break;
    case absl::StatusCode::kPermissionDenied: e.http_status = 403; e.type = "permission_error"; break;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable: e.http_status = 503; e.type = "server_error"; break;
    case absl::StatusCode::kDeadlineExceeded: e.http_status = 504; e.type = "server_error"; break;
    case absl::StatusCode::kCancelled: e.http_status = 499; break;
    case absl::StatusCode::kUnimplemented: e.http_status = 501; e.type = "server_error"; break;
    default: e.http_status = 500; e.type = "server_error"; break;
  }
  return e;
}

ApiError ErrorForRequest(const absl::Status& status, const ApiRequest& request) {
  ApiError e = ErrorFromStatus(status);
  if (status.code() != absl::StatusCode::kInvalidArgument) return e;
  // The router's messages start with the field they concern (router/validation.cc,
  // common/request_limits.cc).
  const absl::string_view m = status.message();
  const std::string prompt_param = request.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (absl::StrContains(m, "max_new_tokens")) {
    e.param = request.max_tokens_param;
    e.message = absl::StrReplaceAll(m, {{"max_new_tokens", request.max_tokens_param}});
  } else if (absl::StartsWith(m, "prompt")) {
    e.param = prompt_param;
  } else if (absl::StartsWith(m, "stop_token_ids")) {
    e.param = "stop_token_ids";
  } else if (absl::StartsWith(m, "stop")) {
    e.param = "stop";
  } else if (absl::StartsWith(m, "json_schema: ")) {  // model::JsonSchema's compile errors
    e.param = "response_format.json_schema.schema";
  } else {
    for (const char* field : {"temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                              "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
                              "cache_salt", "prompt_logprobs"}) {
      if (absl::StartsWith(m, absl::StrCat(field, " "))) e.param = field;
    }
  }
  return e;
}

// A name is written into the prompt and parsed back out of the call's markup, so quotes,
// brackets and DeepSeek's marker characters must not reach it.
bool IsToolName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  });
}

ApiError ModelNotFound(const std::string& model, const std::string& served_model) {
  return ApiError{404, absl::StrCat("The model '", model, "' does not exist; this server serves '",
                                    served_model, "'"),
                  "invalid_request_error", "model", "model_not_found"};
}

void ReadChatPrompt(RequestReader& r, ApiRequest* out) {
  ReadMessages(r, out);
  ReadTools(r, out);
}

std::variant<ApiRequest, ApiError> ParseApiRequest(Endpoint endpoint, const std::string& body,
                                                   const std::string& served_model) {
  std::variant<Json, ApiError> parsed = ParseRequestBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const Json& j = std::get<Json>(parsed);
  const std::set<std::string>& own = endpoint == Endpoint::kChat ? ChatKeys() : CompletionKeys();
  for (const auto& [key, value] : j.items()) {
    if (CommonKeys().count(key) == 0 && own.count(key) == 0) {
      return Invalid(absl::StrCat("unrecognized request argument supplied: ", key), key);
    }
  }
  RequestReader r(j);
  ApiRequest out;
  out.endpoint = endpoint;
  std::optional<std::string> model = r.String("model");
  if (r.failed()) return *r.error();
  if (!model) return Invalid("'model' is required", "model");
  if (*model != served_model) return ModelNotFound(*model, served_model);
  out.model = *model;
  out.stream = r.Bool("stream").value_or(false);
  if (const Json* so = r.Get("stream_options"); so != nullptr && !r.failed()) {
    if (!out.stream) return Invalid("'stream_options' is only allowed with \"stream\": true", "stream_options");
    if (!so->is_object()) return Invalid("'stream_options' must be an object", "stream_options");
    for (const auto& [key, value] : so->items()) {
      if ((key != "include_usage" && key != "continuous_usage_stats") || !value.is_boolean()) {
        return Invalid(absl::StrCat("'stream_options' accepts the booleans include_usage and "
                                    "continuous_usage_stats, not '", key, "'"), "stream_options");
      }
      (key == "include_usage" ? out.include_usage : out.continuous_usage_stats) = value.get<bool>();
    }
  }
  r.String("user");
  if (std::optional<std::string> salt = r.String("cache_salt")) out.cache_salt = std::move(*salt);
  if (std::optional<int32_t> n = r.Int32("n", 1, kMaxChoices)) out.n = *n;
  if (endpoint == Endpoint::kCompletions) out.echo = r.Bool("echo").value_or(false);
  RequireOff(r, endpoint);
  ReadSampling(r, endpoint, &out.sampling, out.max_tokens_param);
  ReadLogprobs(r, endpoint, &out);
  ReadPromptLogprobs(r, &out);
  if (endpoint == Endpoint::kChat) {
    ReadChatPrompt(r, &out);
    ReadResponseFormat(r, &out);
  } else {
    ReadPrompt(r, &out);
  }
  if (r.failed()) return *r.error();
  const int64_t calls = static_cast<int64_t>(out.prompts.size()) * out.n;
  if (calls > kMaxCallsPerRequest) {
    return Invalid(absl::StrCat("'prompt' holds ", out.prompts.size(), " prompts and n is ", out.n,
                                ": ", calls, " completions; at most ", kMaxCallsPerRequest,
                                " per request"),
                   "prompt");
  }
  return out;
}

}  // namespace mlaserve::router::openai
