// DeepSeek-V3.2's chat format. The final DeepSeek-V3.2 publishes no Jinja chat template, only a
// Python encoder (encoding/encoding_dsv32.py in its checkpoint; SGLang and vLLM carry
// adaptations of it). This renders the same prompt for the conversations the OpenAI chat API
// takes, tested byte for byte against that encoder (tests/fixtures/chat_template/deepseek_v32.json,
// made by tools/make_deepseek_v32_encoding_fixtures.py):
//
//   <BOS> then per message:
//   system     its content ("" when null)
//   user       <｜User｜>{content}<｜Assistant｜> then <think> (the last user message, thinking
//              mode) or </think>
//   developer  as user, the content after "\n\n# The user's message is: "
//   assistant  [{reasoning_content}</think> in thinking mode after the last user message]
//              {content}[\n\n<｜DSML｜function_calls>...</｜DSML｜function_calls>]<EOS>
//   tool       results of the assistant message's calls: \n\n<function_results>, a
//              \n<result>{content}</result> per call, \n</function_results> then \n\n<think> or
//              \n\n</think>
//
// In thinking mode the reasoning of assistant messages before the last user message is dropped
// (and, as in the encoder, a message of any other role before it makes the conversation invalid).
// Values are printed as Python's str() prints them (a null user content as "None"), as the
// encoder does. What it refuses we refuse (INVALID_ARGUMENT naming the message): a tool result
// without a call, a developer message without content, an assistant message after the last user
// message in thinking mode with neither reasoning nor tool calls, an unknown role. Also refused
// (the encoder would render them; this server does not parse tool calls from the output nor
// constrain it to a schema, as the request-level `tools` and `response_format` are refused):
// `tools` and `response_format` inside a message.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mlaserve::router::chat_template {

inline constexpr char kDeepseekV32Bos[] = "<｜begin▁of▁sentence｜>";
inline constexpr char kDeepseekV32Eos[] = "<｜end▁of▁sentence｜>";

// `messages`: the OpenAI chat messages (objects with role, content, reasoning_content,
// tool_calls). `thinking`: the encoder's thinking_mode "thinking" (else "chat").
absl::StatusOr<std::string> EncodeDeepseekV32(const nlohmann::ordered_json& messages, bool thinking);

}  // namespace mlaserve::router::chat_template
