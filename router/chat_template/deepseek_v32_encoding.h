// DeepSeek-V3.2's chat format. The final DeepSeek-V3.2 publishes no Jinja chat template, only a
// Python encoder (encoding/encoding_dsv32.py in its checkpoint; SGLang and vLLM carry
// adaptations of it). This renders the same prompt for the conversations the OpenAI chat API
// takes, tested byte for byte against that encoder (tests/fixtures/chat_template/deepseek_v32.json,
// made by tools/make_deepseek_v32_encoding_fixtures.py):
//
//   <BOS> then per message:
//   system     its content ("" when null), then the sections below
//   user       <｜User｜>{content}<｜Assistant｜> then <think> (the last user message, thinking
//              mode) or </think>
//   developer  as user, the content being the sections below then
//              "\n\n# The user's message is: {content}"
//   assistant  [{reasoning_content}</think> in thinking mode after the last user message]
//              {content}[\n\n<｜DSML｜function_calls>...</｜DSML｜function_calls>]<EOS>
//   tool       results of the assistant message's calls: \n\n<function_results>, a
//              \n<result>{content}</result> per call, \n</function_results> then \n\n<think> or
//              \n\n</think>
//
// The sections of a system or developer message: where it has `tools` (OpenAI's
// [{"type": "function", "function": {...}}]), "\n\n## Tools\n..." telling the DSML call syntax
// and listing each function as json.dumps(function, ensure_ascii=False) (key order as given,
// floats as Python prints them); where it has `response_format`, "\n\n## Response Format:..."
// with it as JSON. Other roles' `tools` and `response_format` are not rendered.
//
// In thinking mode the reasoning of assistant messages before the last user message is dropped
// (and, as in the encoder, a message of any other role before it makes the conversation invalid).
// Values are printed as Python's str() prints them (a null user content as "None"), as the
// encoder does. What it refuses we refuse (INVALID_ARGUMENT naming the message): a tool result
// without a call, a developer message without content, an assistant message after the last user
// message in thinking mode with neither reasoning nor tool calls, an unknown role, `tools` that
// are not a list of objects with a "function" (in a message of any role). Stricter than the
// encoder, which would print it: a tool whose "function" is not an object.
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

// How the OpenAI request's own `tools` reach this format, as SGLang 0.5.23 passes them: unless
// messages[0] is a system message, {"role": "system", "content": ""} is put first (whether or not
// there are tools, as SGLang does); then that message's `tools` become `tools` (as the request
// has them, [{"type": "function", "function": {...}}]; replacing any it had; left alone when
// `tools` is null or empty). A `messages` that is not an array is returned as it is.
nlohmann::ordered_json WithRequestTools(nlohmann::ordered_json messages, const nlohmann::ordered_json& tools);
// The same for a request's response_format (a json_schema one, as the client sent it): set as
// the first message's `response_format` (an empty system message put first when there is
// none), which the encoder renders as its "## Response Format" section.
nlohmann::ordered_json WithRequestResponseFormat(nlohmann::ordered_json messages,
                                                 const nlohmann::ordered_json& response_format);

}  // namespace mlaserve::router::chat_template
