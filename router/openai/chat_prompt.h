// ChatPrompt: a chat request (ApiRequest of Endpoint::kChat) as the prompt text the model is
// given: the checkpoint's chat template (or DeepSeek-V3.2's built-in format) over the request's
// messages and chat_template_kwargs, its tools where this model's template or tool-call syntax
// puts them (tool_prompt.h), and a forced tool call's opening at the end. With
// continue_final_message the rendered text is cut right after the final message's content (as
// transformers 5.x's apply_chat_template cuts it: at a marker rendered after the content), so
// the answer continues that message.
//
// /v1/chat/completions and /tokenize's messages form both render through Render(), so the
// tokens /tokenize counts are the ones a chat request with the same fields sends. Tokenizing
// the text (and its bounds) is the caller's: HttpApi holds it to the router's prompt bounds.
//
// A request's own `chat_template` (vLLM's; only with Options::trust_request_chat_template)
// takes the place of the server's template for that request, as a --chat-template file with
// that text would: the same variables (the checkpoint's special tokens included), tools shown
// where it reads `tools` or else in the tool section, the continue_final_message cut and the
// <think> detection on what it renders. What stays the server's: the tool-call syntax the
// answer is parsed with and a forced call opens with (--tool-call-parser, or read off the
// checkpoint's template), as vLLM's tool parser is the server's. Request templates are
// compiled once per text (RequestTemplateCache).
//
// Immutable after Create() but for the template cache (locked inside); Render() may be called
// from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/checkpoint_template.h"
#include "router/openai/api_request.h"
#include "router/openai/request_template_cache.h"
#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {

class ChatPrompt {
 public:
  // What a rendered prompt sets up for its answer.
  struct Setup {
    bool opens_reasoning = false;               // the prompt ends inside <think>
    std::optional<ToolCallFormat> tool_calls;   // the answer is parsed for tool calls
    std::string call_opening;                   // the forced call's opening, ending the prompt
    std::vector<std::string> history_call_ids;  // the ids of the history's calls (kimi_k2's count)
  };

  struct Options {
    // "auto" reads the tool-call syntax off the checkpoint's template, "none" refuses requests
    // with tools, or a ToolCallFormatName.
    std::string tool_call_parser = "auto";
    // Whether a request may bring its own `chat_template` (--trust-request-chat-template).
    bool trust_request_chat_template = false;
    // Compiled request templates kept (RequestTemplateCache).
    size_t request_templates_cached = 32;
  };

  // `chat_template`: the checkpoint's, or why there is none (Render then answers a 400 saying
  // so, unless the request brings its own). INVALID_ARGUMENT for an unknown parser name or one
  // that does not match DeepSeek-V3.2's built-in format.
  static absl::StatusOr<ChatPrompt> Create(absl::StatusOr<chat_template::CheckpointChatTemplate> chat_template,
                                           Options options);

  // The prompt text for `r`, with what it sets up in `setup`; a 400 naming the parameter when
  // the request cannot be rendered (no template, tools this model cannot be shown, a
  // template error, a forced call in thinking mode; continue_final_message with a forced call,
  // JSON mode, a final message without text, or one whose content the template does not
  // render; a request's `chat_template` without --trust-request-chat-template, over
  // kMaxRequestTemplateBytes, or that does not compile).
  std::variant<std::string, ApiError> Render(const ApiRequest& r, Setup* setup) const;

  // The tool-call syntax of the model's output; nullopt: requests with tools are refused.
  const std::optional<ToolCallFormat>& tool_call_format() const { return tool_call_format_; }

 private:
  // The template one request renders with: the checkpoint's or the request's own.
  struct Template {
    std::string origin;                          // for errors
    const chat_template::ChatTemplate* jinja;    // nullptr: DeepSeek-V3.2's format
    bool reads_tools = false;                    // the Jinja template renders `tools` itself
    std::shared_ptr<const RequestTemplate> own;  // keeps a request's template alive
  };

  ChatPrompt() = default;
  // The template `r` renders with, or the 400 saying why it has none.
  std::variant<Template, ApiError> TemplateFor(const ApiRequest& r) const;
  // The template's variables for `r`: its messages, with the tools where the model will see
  // them.
  std::variant<nlohmann::ordered_json, ApiError> Variables(const ApiRequest& r, const Template& t,
                                                           Setup* setup) const;

  absl::StatusOr<chat_template::CheckpointChatTemplate> chat_template_ =
      absl::FailedPreconditionError("no chat template");
  std::optional<ToolCallFormat> tool_call_format_;
  bool template_reads_tools_ = false;  // the checkpoint's Jinja template renders `tools` itself
  Options options_;
  // Non-null with trust_request_chat_template. Shared so ChatPrompt stays movable.
  std::shared_ptr<RequestTemplateCache> request_templates_;
};

// The chat route's Generate requests for a chat request, with what its prompt sets up, or the
// error to answer with: how the Responses and Anthropic routes run a request through chat's code
// (one request: neither has `n`).
using ChatToGenerate = std::function<std::variant<std::vector<v1::GenerateRequest>, ApiError>(
    const ApiRequest&, ChatPrompt::Setup*)>;

}  // namespace mlaserve::router::openai
