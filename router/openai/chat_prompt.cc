#include "router/openai/chat_prompt.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "router/chat_template/deepseek_v32_encoding.h"
#include "router/openai/reasoning_splitter.h"
#include "router/openai/tool_prompt.h"

namespace mlaserve::router::openai {

using Json = nlohmann::ordered_json;

namespace {

ApiError ContinueError(std::string message) {
  return ApiError{400, std::move(message), "invalid_request_error", "continue_final_message", std::nullopt};
}

// What continue_final_message cannot be combined with, before anything is rendered.
std::optional<ApiError> CheckContinuable(const ApiRequest& r) {
  if (r.tool_choice == ApiRequest::ToolChoice::kRequired || r.tool_choice == ApiRequest::ToolChoice::kNamed) {
    return ContinueError(
        "'continue_final_message' cannot be combined with 'tool_choice' \"required\" or a named "
        "function: the forced call's opening would follow the continued message; use \"auto\" or "
        "\"none\"");
  }
  // The JSON constraint starts a fresh value at the first generated token, which here falls
  // inside the continued message: a message that begins the JSON would be forced into a second
  // value after it.
  if (r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT ||
      r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_SCHEMA) {
    return ContinueError(
        "'continue_final_message' cannot be combined with a json_object or json_schema "
        "'response_format': the constraint would start a new JSON value in the middle of the "
        "continued message; drop one of them");
  }
  if (r.messages.empty()) return ContinueError("'continue_final_message' is set but there are no 'messages'");
  const Json& content = r.messages.back().contains("content") ? r.messages.back()["content"] : Json();
  if (!content.is_string()) {
    return ContinueError("'continue_final_message' is set but the final message has no text content to continue");
  }
  return std::nullopt;
}

// transformers 5.x's continue_final_message: the final message's content is rendered with
// this marker after it, and the prompt cut where the marker starts, so that it ends right after
// the content wherever else that text occurs. Where the template trimmed the marker's space
// (it trims the content), the cut's trailing whitespace goes too.
constexpr absl::string_view kContinueMarker = "CONTINUE_FINAL_MESSAGE_TAG ";

std::variant<std::string, ApiError> CutAtContinueMarker(std::string rendered, const std::string& content) {
  const absl::string_view marker = absl::StripTrailingAsciiWhitespace(kContinueMarker);
  const absl::string_view stripped = absl::StripAsciiWhitespace(content);
  const size_t at = rendered.rfind(marker.data(), std::string::npos, marker.size());
  if (at == std::string::npos || rendered.find(stripped.data(), 0, stripped.size()) == std::string::npos) {
    return ContinueError(
        "'continue_final_message' is set but the final message's content does not appear in the "
        "prompt the chat template renders (the template changes or drops it), so the prompt "
        "cannot end inside it");
  }
  const bool kept = rendered.compare(at, kContinueMarker.size(), kContinueMarker.data(), kContinueMarker.size()) == 0;
  rendered.resize(at);
  // Python's rstrip() also strips Unicode spaces; this strips ASCII whitespace.
  if (!kept) rendered.resize(absl::StripTrailingAsciiWhitespace(rendered).size());
  return rendered;
}

}  // namespace

absl::StatusOr<ChatPrompt> ChatPrompt::Create(absl::StatusOr<chat_template::CheckpointChatTemplate> chat_template,
                                              Options options) {
  ChatPrompt p;
  const std::string& tool_call_parser = options.tool_call_parser;
  if (tool_call_parser == "auto") {
    if (chat_template.ok()) p.tool_call_format_ = DetectToolCallFormat(*chat_template);
  } else if (tool_call_parser != "none") {
    p.tool_call_format_ = ToolCallFormatFromName(tool_call_parser);
    if (!p.tool_call_format_.has_value()) {
      std::string names = "auto, none";
      for (const ToolCallFormat f : kToolCallFormats) absl::StrAppend(&names, ", ", std::string(ToolCallFormatName(f)));
      return absl::InvalidArgumentError(
          absl::StrCat("tool-call parser '", tool_call_parser, "' is not one of ", names));
    }
    // DeepSeek-V3.2's built-in format describes DSML to the model: another syntax would
    // never be parsed.
    if (chat_template.ok() && !chat_template->tmpl.has_value() &&
        *p.tool_call_format_ != ToolCallFormat::kDeepseekV32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool-call parser '", tool_call_parser, "' does not match DeepSeek-V3.2's chat "
          "format, whose tool calls are deepseek_v32 (DSML); use auto or deepseek_v32"));
    }
  }
  if (options.trust_request_chat_template) {
    p.request_templates_ = std::make_shared<RequestTemplateCache>(options.request_templates_cached);
  }
  p.template_reads_tools_ = chat_template.ok() && chat_template->tmpl.has_value() &&
                            chat_template->tmpl->ReadsVariable("tools");
  p.chat_template_ = std::move(chat_template);
  p.options_ = std::move(options);
  return p;
}

std::variant<ChatPrompt::Template, ApiError> ChatPrompt::TemplateFor(const ApiRequest& r) const {
  if (!r.chat_template.has_value()) {
    if (!chat_template_.ok()) {
      return ApiError{400, absl::StrCat("this model has no usable chat template (",
                                        chat_template_.status().message(),
                                        "); use /v1/completions, or start the router with "
                                        "--chat-template FILE"),
                      "invalid_request_error", "messages", "chat_template_unavailable"};
    }
    const chat_template::ChatTemplate* jinja = chat_template_->tmpl.has_value() ? &*chat_template_->tmpl : nullptr;
    return Template{chat_template_->origin, jinja, template_reads_tools_, nullptr};
  }
  if (request_templates_ == nullptr) {
    return ApiError{400,
                    "'chat_template' is not accepted: this server renders chats with its own template; "
                    "start the router with --trust-request-chat-template to let requests bring theirs",
                    "invalid_request_error", "chat_template", std::nullopt};
  }
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> own = request_templates_->Get(*r.chat_template);
  if (!own.ok()) {
    return ApiError{400, absl::StrCat("'chat_template': ", own.status().message()), "invalid_request_error",
                    "chat_template", std::nullopt};
  }
  const chat_template::ChatTemplate* jinja = &(*own)->tmpl;
  return Template{"the request's chat_template", jinja, (*own)->reads_tools, *std::move(own)};
}

std::variant<Json, ApiError> ChatPrompt::Variables(const ApiRequest& r, const Template& t, Setup* setup) const {
  // The checkpoint's special tokens, for a request's own template too (as vLLM passes the
  // tokenizer's).
  Json vars = chat_template_.ok() ? chat_template_->special_tokens : Json::object();
  vars["messages"] = r.messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = r.add_generation_prompt;
  for (const auto& [k, v] : r.chat_template_kwargs.items()) vars[k] = v;
  // DeepSeek-V3.2's encoder renders a system message's response_format ("## Response
  // Format" with its JSON): a json_schema request's goes on the first message, as the tools
  // do (the output is held to it as well).
  if (t.jinja == nullptr && !r.response_format.is_null()) {
    vars["messages"] = chat_template::WithRequestResponseFormat(vars["messages"], r.response_format);
  }
  if (r.tool_choice == ApiRequest::ToolChoice::kNone) return vars;
  if (r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT ||
      r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_SCHEMA) {
    const bool object = r.sampling.response_format() == v1::RESPONSE_FORMAT_JSON_OBJECT;
    return ApiError{400,
                    absl::StrCat("'response_format' ", object ? "json_object" : "json_schema",
                                 " cannot be combined with 'tools': a tool call is not ",
                                 object ? "a JSON object" : "the schema's value",
                                 "; use tool_choice \"none\" or drop response_format"),
                    "invalid_request_error", "response_format", std::nullopt};
  }
  if (!tool_call_format_.has_value()) {
    const std::string why = options_.tool_call_parser == "none"
                                ? std::string("this server runs with --tool-call-parser none")
                                : absl::StrCat(chat_template_.ok() ? chat_template_->origin
                                                                   : std::string("this model's checkpoint"),
                                               " writes no tool calls, so the tool-call syntax of "
                                               "this model is unknown; start the router with "
                                               "--tool-call-parser");
    return ApiError{400, absl::StrCat("'tools' cannot be served: ", why), "invalid_request_error",
                    "tools", std::nullopt};
  }
  // A named function is the only tool the model is shown (as SGLang does).
  Json tools = Json::array();
  for (const Json& tool : r.tools) {
    if (r.tool_choice != ApiRequest::ToolChoice::kNamed || tool["function"]["name"] == r.tool_name) {
      tools.push_back(tool);
    }
  }
  setup->tool_calls = tool_call_format_;
  setup->history_call_ids = HistoryCallIds(r.messages);
  if (t.jinja == nullptr) {
    vars["messages"] = chat_template::WithRequestTools(r.messages, tools);
  } else if (t.reads_tools) {
    vars["tools"] = std::move(tools);
  } else if (*tool_call_format_ != ToolCallFormat::kDeepseekV32) {
    vars["messages"] = WithToolsSection(r.messages, ToolsSection(*tool_call_format_, tools));
  } else {
    return ApiError{400,
                    absl::StrCat("'tools' cannot be served: ", t.origin,
                                 " does not render tools and DeepSeek-V3.2's tool section "
                                 "is its encoder's; drop ",
                                 t.own != nullptr ? "the request's chat_template" : "--chat-template"),
                    "invalid_request_error", "tools", std::nullopt};
  }
  return vars;
}

std::variant<std::string, ApiError> ChatPrompt::Render(const ApiRequest& r, Setup* setup) const {
  std::variant<Template, ApiError> chosen = TemplateFor(r);
  if (auto* e = std::get_if<ApiError>(&chosen)) return *e;
  const Template& t = std::get<Template>(chosen);
  if (r.continue_final_message) {
    if (std::optional<ApiError> e = CheckContinuable(r)) return *e;
  }
  std::optional<ApiRequest> marked;  // the request with the marker after its final content
  if (r.continue_final_message) {
    marked = r;
    Json& content = marked->messages.back()["content"];
    content = content.get<std::string>() + std::string(kContinueMarker);
  }
  std::variant<Json, ApiError> vars = Variables(marked.has_value() ? *marked : r, t, setup);
  if (auto* e = std::get_if<ApiError>(&vars)) return *e;
  absl::StatusOr<std::string> prompt =
      t.jinja != nullptr ? t.jinja->Render(std::get<Json>(vars)) : chat_template_->Render(std::get<Json>(vars));
  if (!prompt.ok()) {
    // A template's own errors (raise_exception) are about the request, as for the server's.
    return ApiError{400,
                    absl::StrCat("rendering ", t.own != nullptr ? "the request's chat_template" : "the chat template",
                                 " failed: ", prompt.status().message()),
                    "invalid_request_error", "messages", std::nullopt};
  }
  if (r.continue_final_message) {
    std::variant<std::string, ApiError> cut =
        CutAtContinueMarker(*std::move(prompt), r.messages.back()["content"].get<std::string>());
    if (auto* e = std::get_if<ApiError>(&cut)) return *e;
    prompt = std::get<std::string>(std::move(cut));
  }
  setup->opens_reasoning = ReasoningSplitter::PromptOpensReasoning(*prompt);
  if (r.tool_choice == ApiRequest::ToolChoice::kRequired || r.tool_choice == ApiRequest::ToolChoice::kNamed) {
    // A call is made certain by writing its opening (and the named function) at the prompt's
    // end; a prompt that opened a <think> would lose it.
    if (setup->opens_reasoning) {
      return ApiError{400,
                      "'tool_choice' \"required\" or a named function cannot be combined with "
                      "thinking mode: the call would have to start before the reasoning ends; use "
                      "\"auto\" or turn thinking off",
                      "invalid_request_error", "tool_choice", std::nullopt};
    }
    const bool named = r.tool_choice == ApiRequest::ToolChoice::kNamed;
    setup->call_opening = ToolCallParser::CallOpening(
        *setup->tool_calls, named ? std::optional<std::string>(r.tool_name) : std::nullopt, setup->history_call_ids);
    *prompt += setup->call_opening;
  }
  return *std::move(prompt);
}

}  // namespace mlaserve::router::openai
