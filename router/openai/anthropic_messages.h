// Anthropic's `system` and `messages` (POST /v1/messages) as the chat messages the router
// renders with the chat template. A message's content is a string or content blocks; each
// block becomes what chat has for it:
//
//   user      text                    the user message's text parts (joined as chat joins them)
//             tool_result             {"role": "tool", "tool_call_id": tool_use_id, "content"}: a
//                                     message of its own, in the block's place (text blocks before
//                                     and after it make user messages around it)
//   assistant text                    the assistant message's content
//             tool_use                a tool_calls entry {id, type "function", function {name,
//                                     arguments: input}} (chat writes the object as JSON text)
//             thinking                reasoning_content (several joined by newlines), which the
//                                     template renders or drops as it does chat's
//             redacted_thinking       dropped: it is another server's encrypted reasoning
//
// `system` (a string or text blocks) is a system message first. Blocks a text model cannot
// read (image, document, search_result, ...) and the server tools' blocks are 400s naming the
// block's type and place ("messages.0.content.1"); block fields this server does not use
// (cache_control, citations, a tool result's is_error) are accepted and ignored.
#pragma once

#include <variant>

#include "nlohmann/json.hpp"
#include "router/openai/api_request.h"

namespace mlaserve::router::openai {

// The chat messages for `system` (nullptr when not given) and `messages`; a 400 naming the
// field ("system", "messages.3.content.0.tool_use_id", ...) otherwise.
std::variant<nlohmann::ordered_json, ApiError> AnthropicMessagesToChat(const nlohmann::ordered_json* system,
                                                                       const nlohmann::ordered_json& messages);

}  // namespace mlaserve::router::openai
