// OpenAI request bodies (/v1/completions, /v1/chat/completions) -> ApiRequest, and errors in
// OpenAI's shape. Only the HTTP-facing checks live here (JSON types, parameters OpenAI has and
// the engine does not, the model name); sampling ranges, prompt bounds and stop strings are
// checked by the router's Generate path (router/validation.h), the same code gRPC requests
// go through, so both APIs refuse the same values with the same messages.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "mlaserve/v1/api.pb.h"
#include "nlohmann/json.hpp"

namespace mlaserve::router::openai {

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;
  std::optional<std::string> code;
};
nlohmann::ordered_json ErrorBody(const ApiError& error);

// A router status (api.proto's codes) as an OpenAI error: INVALID_ARGUMENT and
// FAILED_PRECONDITION 400, NOT_FOUND 404, ALREADY_EXISTS 409, RESOURCE_EXHAUSTED and
// UNAVAILABLE 503 (retryable; the openai client retries them), DEADLINE_EXCEEDED 504,
// CANCELLED 499, UNIMPLEMENTED 501, others 500. `code` is the status code's name.
ApiError ErrorFromStatus(const absl::Status& status);

enum class Endpoint { kCompletions, kChat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  bool stream = false;
  int n = 1;  // choices: one Generate call each
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats (vLLM's)
  // Completions: the prompts (OpenAI's `prompt` may hold several), each as text or as token
  // ids. Each gets n choices.
  struct Prompt {
    std::optional<std::string> text;
    std::vector<int32_t> ids;
  };
  std::vector<Prompt> prompts;
  bool echo = false;  // completions: each choice's text starts with its prompt
  // Completions with echo and max_tokens 0 (OpenAI's and vLLM's way to score a prompt): the
  // choice is the prompt alone. One token is generated (the API's least) and dropped: the
  // text, logprobs and usage report none, finish_reason "length".
  bool prompt_only = false;
  // Completions with echo and logprobs n: the choice's logprobs cover the prompt's tokens too
  // (the first one null), with n alternatives each, as vLLM's.
  bool echo_logprobs = false;
  // vLLM's prompt_logprobs parameter (0..20): the choice's (completions) or the response's
  // (chat) `prompt_logprobs` list. Not with stream (vLLM's rule), except 0, which is then
  // neither computed nor returned.
  std::optional<int32_t> prompt_logprobs;
  // Chat: the messages as the chat template sees them (text content parts joined), and the
  // template's other inputs.
  nlohmann::ordered_json messages;
  bool add_generation_prompt = true;
  // transformers' / vLLM's continue_final_message: the prompt is cut right after the final
  // message's content, so the answer continues that message (a prefilled assistant turn). Needs
  // add_generation_prompt false; ChatPrompt::Render does the cut and its refusals.
  bool continue_final_message = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  // vLLM's request-level `chat_template`: the Jinja text to render this chat with instead of
  // the server's template. Read here whatever the server allows; ChatPrompt::Render refuses it
  // unless the router runs with --trust-request-chat-template.
  std::optional<std::string> chat_template;
  // Chat: the tools the model may call, as OpenAI gives them ([{"type": "function",
  // "function": {"name", "description", "parameters", "strict"}}], names unique), and which
  // it must call: kNone (the default without tools) renders none and parses none; kAuto (the
  // default with tools) lets the model choose; kRequired and kNamed make it call one (the
  // router writes the call's opening into the prompt; tool_name names kNamed's function).
  enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;
  bool parallel_tool_calls = true;  // false: only the first call is returned
  v1::SamplingParams sampling;
  // vLLM's cache_salt (api.proto GenerateRequest.cache_salt): prefix-cache pages are shared
  // only with requests of the same salt; empty: the shared default.
  std::string cache_salt;
  // A json_schema response_format as the client sent it (null otherwise): DeepSeek-V3.2's
  // encoder renders it into the prompt's first system message.
  nlohmann::ordered_json response_format;
  // The name this request gave the output bound ("max_tokens" or "max_completion_tokens"),
  // for the errors that concern it.
  std::string max_tokens_param = "max_tokens";
};

// The most choices (`n`) one request may ask for, and the most Generate calls (prompts x n)
// one completions request may start.
inline constexpr int kMaxChoices = 16;
inline constexpr int kMaxCallsPerRequest = 64;

// OpenAI's max_tokens default for /v1/completions (its documented default).
inline constexpr int32_t kCompletionsDefaultMaxTokens = 16;

// ErrorFromStatus for a status the router's Generate path gave `request`, with `param` naming
// the request parameter it concerns and the router's own field names (max_new_tokens) replaced
// by the ones the request used.
ApiError ErrorForRequest(const absl::Status& status, const ApiRequest& request);

// 404 model_not_found for a request naming `model` when this server serves `served_model` (as
// OpenAI answers an unknown model).
ApiError ModelNotFound(const std::string& model, const std::string& served_model);

// Whether `name` may name a tool: OpenAI's rule (^[a-zA-Z0-9_-]{1,64}$), with '.' and ':'
// also allowed as some clients namespace their tools so.
bool IsToolName(std::string_view name);

class RequestReader;
// The chat prompt's fields as /v1/chat/completions reads them: `messages` (required; text
// content parts joined, tool calls normalized), `add_generation_prompt`,
// `continue_final_message` (not with add_generation_prompt true, vLLM's rule),
// `chat_template` (a string; null is not given), `chat_template_kwargs` and `tools` (with `tool_choice` and `parallel_tool_calls`). /tokenize
// reads its messages form with this, so it renders the prompt chat renders.
void ReadChatPrompt(RequestReader& r, ApiRequest* out);

// Parses a request body for `endpoint`; an ApiError (400) naming the parameter otherwise.
// `served_model` is the only model name accepted (404 model_not_found otherwise, as OpenAI).
std::variant<ApiRequest, ApiError> ParseApiRequest(Endpoint endpoint, const std::string& body,
                                                   const std::string& served_model);

}  // namespace mlaserve::router::openai
