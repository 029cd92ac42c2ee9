#include "router/openai/tool_prompt.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kKimiSectionBegin = "<|tool_calls_section_begin|>";

}  // namespace

std::optional<ToolCallFormat> DetectToolCallFormat(const chat_template::CheckpointChatTemplate& chat) {
  if (!chat.tmpl.has_value() || chat.source.find("｜DSML｜") != std::string::npos) {
    return ToolCallFormat::kDeepseekV32;
  }
  const std::string& s = chat.source;
  if (s.find(kKimiSectionBegin) != std::string::npos) return ToolCallFormat::kKimiK2;
  bool any = false;
  for (size_t at = s.find(kSep); at != std::string::npos; at = s.find(kSep, at + kSep.size())) {
    any = true;
    // V3's templates write tool['type'] + '<｜tool▁sep｜>' (or "function<｜tool▁sep｜>" in a
    // prompt); V3.1's write the name right after the separator, nothing before it.
    const std::string_view before = std::string_view(s).substr(at >= 24 ? at - 24 : 0, at >= 24 ? 24 : at);
    if (before.find("type") != std::string_view::npos || before.ends_with("function")) {
      return ToolCallFormat::kDeepseekV3;
    }
  }
  if (any) return ToolCallFormat::kDeepseekV31;
  return std::nullopt;
}

std::string ToolsSection(ToolCallFormat format, const Json& tools) {
  std::string out = "## Tools\nYou have access to the following tools:\n";
  for (const Json& tool : tools) {
    const Json& f = tool["function"];
    const std::string description =
        f.contains("description") && f["description"].is_string() ? f["description"].get<std::string>() : "";
    const std::string parameters =
        f.contains("parameters") && f["parameters"].is_object() ? chat_template::PythonJson(f["parameters"]) : "{}";
    absl::StrAppend(&out, "\n### ", f["name"].get<std::string>(), "\nDescription: ", description,
                    "\n\nParameters: ", parameters, "\n");
  }
  if (format == ToolCallFormat::kDeepseekV3) {
    absl::StrAppend(&out,
                    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>tool_call_name\n"
                    "```json\ntool_call_arguments\n```<｜tool▁call▁end｜>{{additional_tool_calls}}"
                    "<｜tool▁calls▁end｜>\n\n"
                    "Where:\n\n"
                    "- `tool_call_name` must be an exact match to one of the available tools\n"
                    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's "
                    "Parameters Schema\n"
                    "- For multiple tool calls, put each on its own line, each in its own "
                    "<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>\n");
  } else if (format == ToolCallFormat::kKimiK2) {
    absl::StrAppend(&out,
                    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
                    "<|tool_calls_section_begin|><|tool_call_begin|>functions.tool_call_name:tool_call_index"
                    "<|tool_call_argument_begin|>tool_call_arguments<|tool_call_end|>{{additional_tool_calls}}"
                    "<|tool_calls_section_end|>\n\n"
                    "Where:\n\n"
                    "- `tool_call_name` must be an exact match to one of the available tools\n"
                    "- `tool_call_index` counts the tool calls of the conversation, from 0\n"
                    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's "
                    "Parameters Schema\n"
                    "- For multiple tool calls, chain them directly without separators or spaces\n");
  } else {
    absl::StrAppend(&out,
                    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>"
                    "tool_call_arguments<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\n"
                    "Where:\n\n"
                    "- `tool_call_name` must be an exact match to one of the available tools\n"
                    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's "
                    "Parameters Schema\n"
                    "- For multiple tool calls, chain them directly without separators or spaces\n");
  }
  return out;
}

Json WithToolsSection(Json messages, const std::string& section) {
  for (size_t i = messages.size(); i-- > 0;) {
    Json& m = messages[i];
    if (m.value("role", "") != "system") continue;
    const std::string content = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    m["content"] = content.empty() ? section : absl::StrCat(content, "\n\n", section);
    return messages;
  }
  messages.insert(messages.begin(), Json{{"role", "system"}, {"content", section}});
  return messages;
}

std::vector<std::string> HistoryCallIds(const Json& messages) {
  std::vector<std::string> ids;
  for (const Json& m : messages) {
    const auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (const Json& call : *calls) {
      const auto id = call.find("id");
      ids.push_back(id != call.end() && id->is_string() ? id->get<std::string>() : "");
    }
  }
  return ids;
}

}  // namespace mlaserve::router::openai
