// Anthropic's Messages API request (POST /v1/messages, and /v1/messages/count_tokens with the
// same body) as the chat request the router serves it with, the way the Responses API maps its
// requests (responses_request.h): `system` and `messages` become chat messages
// (anthropic_messages.h) and the parameters chat's:
//
//   max_tokens -> max_tokens            stop_sequences -> stop
//   temperature ([0, 1]), top_p, top_k  -> the same
//   tools [{name, description, input_schema, strict}] -> chat's function tools
//   tool_choice {auto | any | tool + name | none, disable_parallel_tool_use}
//                                       -> "auto" / "required" / the named function / "none",
//                                          parallel_tool_calls
//   thinking {enabled, budget_tokens} | {adaptive} | {disabled}
//                                       -> chat_template_kwargs thinking / enable_thinking
//   output_config {format: json_schema} -> response_format json_schema (strict);
//                 {effort}             -> chat_template_kwargs reasoning_effort
//   metadata.user_id -> user;  a final assistant message -> continue_final_message (prefill)
//
// ToChat hands that body to ParseApiRequest, so sampling ranges, tools, structured outputs and
// the template's inputs are checked by the chat route's own code; AnthropicParamNames gives
// its errors back in this API's field names. A top-level field Anthropic's API does not have is
// a 400 "X: Extra inputs are not permitted", as Anthropic answers it; Anthropic's fields for
// features this server does not have (container, mcp_servers, context_management, diagnostics,
// inference_geo, speed "fast") are 400s naming them unless null.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

enum class AnthropicRoute {
  kMessages,     // POST /v1/messages: max_tokens required
  kCountTokens,  // POST /v1/messages/count_tokens: the same body, max_tokens optional
};

struct AnthropicRequest {
  std::string model;
  bool stream = false;
  // The chat request body the request becomes, `model` and `messages` included.
  nlohmann::ordered_json chat_body = nlohmann::ordered_json::object();
};

// Parses a /v1/messages (or count_tokens) body; a 400 naming the field otherwise, or 404 for
// another `model` than `served_model`.
std::variant<AnthropicRequest, ApiError> ParseAnthropicRequest(const std::string& body,
                                                               const std::string& served_model,
                                                               AnthropicRoute route);

// The chat request `r` stands for, parsed by the chat route's parser; its errors renamed.
std::variant<ApiRequest, ApiError> AnthropicToChat(const AnthropicRequest& r, const std::string& served_model);

// An error of the chat route (its parser, the chat template, the router's validation) in this
// API's names: stop -> stop_sequences, response_format -> output_config.format,
// chat_template_kwargs -> thinking, continue_final_message -> messages, user -> metadata.user_id.
ApiError AnthropicParamNames(ApiError error);

}  // namespace mlaserve::router::openai
