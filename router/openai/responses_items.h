// The Responses API's conversation items (POST /v1/responses `input`, and the output items of
// a stored response that a later request continues with previous_response_id) as the chat
// messages /v1/chat/completions renders with the chat template:
//
//   {"type": "message", "role", "content"}   role user / system / developer / assistant
//                                            ("type" may be left out); developer becomes
//                                            system, as OpenAI's chat API reads it; content a
//                                            string or input_text / output_text / refusal
//                                            parts (chat's text parts)
//   {"type": "function_call", "call_id", "name", "arguments"}
//                                            a call on the assistant message before it (or a
//                                            new assistant message without content)
//   {"type": "function_call_output", "call_id", "output"}
//                                            a {"role": "tool", "tool_call_id"} message
//   {"type": "reasoning", "content" / "summary"}
//                                            the `reasoning_content` of the assistant message
//                                            that follows it, which the template renders or
//                                            drops as it does chat's reasoning_content (DeepSeek's
//                                            R1 / V3.1 templates drop it; V3.2's format shows a
//                                            tool loop's reasoning); none follows: dropped
//
// Images, files, audio, item references and the built-in tools' items are refused with a 400
// naming the item and its type. Pure functions, tested alone (responses_request_test.cc).
#pragma once

#include <string>
#include <variant>

#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

// `input` as a list of items: a string is one user message item; a list is checked item by
// item (a 400 with param "input" naming "input[i]..." otherwise) and kept as given, so that a
// stored conversation holds what the client sent.
std::variant<nlohmann::ordered_json, ApiError> NormalizeInputItems(const nlohmann::ordered_json& input);

// Checked items (NormalizeInputItems', or a response's output items) as chat messages, in
// order. Never fails on checked items.
nlohmann::ordered_json ItemsToChatMessages(const nlohmann::ordered_json& items);

}  // namespace mlaserve::router::openai
