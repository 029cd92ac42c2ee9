// OpenAI's Responses API request (POST /v1/responses) as the chat request the router serves
// it with. A Responses request is a chat request in other clothes: its `input` items become
// chat messages (responses_items.h), `instructions` a system message before them, and its
// parameters chat's (max_output_tokens -> max_completion_tokens, text.format ->
// response_format, flat function tools -> chat's tools, top_logprobs / include ->
// logprobs, reasoning.effort -> the template's thinking switch). ToChatRequest hands that body
// to ParseApiRequest, so sampling ranges, tools, structured outputs, logprobs and the chat
// template's inputs are checked by the chat route's own code, and its errors are renamed to
// the Responses parameters (ResponsesError).
//
// What is read here: the Responses fields' JSON shapes; OpenAI's fields this server does not
// serve (background, conversation, prompt templates, built-in tools, truncation "auto", ...) are
// 400s naming the field and value; a field OpenAI's API does not have is a 400 as on chat
// ("unrecognized request argument supplied: X"), except vLLM's sampling extensions, which pass
// through to chat (seed, stop, top_k, min_p, repetition_penalty, presence_penalty,
// frequency_penalty, logit_bias, stop_token_ids, include_stop_str_in_output,
// skip_special_tokens, ignore_eos, cache_salt, chat_template_kwargs, chat_template).
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

struct ResponsesRequest {
  std::string model;
  bool stream = false;
  bool store = true;  // OpenAI's default: the response is kept for previous_response_id / GET
  std::optional<std::string> previous_response_id;
  std::optional<std::string> instructions;  // a system message before the conversation
  // The input as checked items (a string input: one user message item), stored as given.
  nlohmann::ordered_json input = nlohmann::ordered_json::array();
  // The chat request body the rest becomes, every field but `model` and `messages`.
  nlohmann::ordered_json chat_fields = nlohmann::ordered_json::object();
  // The output_text parts carry logprobs (include "message.output_text.logprobs", or
  // top_logprobs above 0).
  bool logprobs = false;
  // What the response object repeats: the request's values, or OpenAI's defaults.
  struct Echo {
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // Responses' flat shape
    nlohmann::ordered_json tool_choice = "auto";
    nlohmann::ordered_json text = {{"format", {{"type", "text"}}}};
    nlohmann::ordered_json reasoning = nullptr;
    nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
    nlohmann::ordered_json max_output_tokens = nullptr;
    nlohmann::ordered_json user = nullptr;
    nlohmann::ordered_json service_tier = "default";
    double temperature = 1.0;
    double top_p = 1.0;
    int top_logprobs = 0;
    bool parallel_tool_calls = true;
  } echo;
};

// Parses a /v1/responses body; a 400 naming the field otherwise, or 404 model_not_found for
// another `model` than `served_model`.
std::variant<ResponsesRequest, ApiError> ParseResponsesRequest(const std::string& body,
                                                               const std::string& served_model);

// The chat request `r` becomes after `history` (the conversation previous_response_id
// continues: the earlier responses' input and output items, oldest first): `instructions` as
// the first, system, message, then the history's and the input's items as chat messages. The
// chat route's errors come back renamed (ResponsesError).
std::variant<ApiRequest, ApiError> ToChatRequest(const ResponsesRequest& r, const nlohmann::ordered_json& history,
                                                 const std::string& served_model);

// An error of the chat route (its parser, the chat template, the router's validation) with the
// Responses API's names: max_completion_tokens -> max_output_tokens, response_format /
// response_format.json_schema -> text.format, messages -> input.
ApiError ResponsesError(ApiError error);

}  // namespace mlaserve::router::openai
