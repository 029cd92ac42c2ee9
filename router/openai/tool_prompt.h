// How a chat request's tools reach the prompt, and which tool-call syntax its output uses.
//
// DeepSeek's own chat templates render tool calls and tool results in the history but never
// the tool definitions (vLLM and SGLang ask for a hand-written --chat-template for that).
// Here a template that reads `tools` gets them, as transformers passes them; for one that
// does not, the router writes the definitions into the system prompt itself:
//   - deepseek_v31: the tool section DeepSeek's V3.1 model card documents ("## Tools", one
//     "### name / Description / Parameters" entry per tool, then the call format);
//   - deepseek_v3: the same layout describing V3 / R1's call syntax (the one their
//     templates render in the history); DeepSeek documents no tool prompt for these;
//   - deepseek_v32: DeepSeek-V3.2's encoder renders tools itself (on the first system
//     message; chat_template::WithRequestTools);
//   - kimi_k2: Kimi's own template renders `tools` (a "tool_declare" system turn), so this
//     section is for a --chat-template that does not: the same layout describing Kimi's call
//     syntax (Moonshot documents no tool prompt in text).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/chat_template/checkpoint_template.h"
#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {

// The call syntax a template renders in its history: DeepSeek-V3.2's format (or a template
// writing DSML) deepseek_v32; a template writing Moonshot's "<|tool_calls_section_begin|>"
// kimi_k2; a template writing "<｜tool▁sep｜>" after the call's type
// ("function<｜tool▁sep｜>name") deepseek_v3, after nothing else deepseek_v31. nullopt when
// the template writes no tool calls.
std::optional<ToolCallFormat> DetectToolCallFormat(const chat_template::CheckpointChatTemplate& chat);

// The system-prompt section describing `tools` (OpenAI's shape, as ApiRequest::tools holds
// them) for a model writing calls in `format` (deepseek_v3, deepseek_v31 or kimi_k2).
std::string ToolsSection(ToolCallFormat format, const nlohmann::ordered_json& tools);

// `messages` with `section` ending the system prompt: appended to the last system message
// after a blank line, or as a system message of its own before the first message when there
// is none (DeepSeek's templates join every system message into the prompt's start).
nlohmann::ordered_json WithToolsSection(nlohmann::ordered_json messages, const std::string& section);

// The ids of the calls in `messages` (ApiRequest::messages: each assistant message's
// tool_calls, in order; "" for a call without a string id), which a response's kimi_k2 call
// ids count from and keep apart from (ToolCallParser).
std::vector<std::string> HistoryCallIds(const nlohmann::ordered_json& messages);

}  // namespace mlaserve::router::openai
