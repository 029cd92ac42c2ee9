#include "router/openai/tool_prompt.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

chat_template::CheckpointChatTemplate FromSource(const std::string& source) {
  absl::StatusOr<chat_template::ChatTemplate> t = chat_template::ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status();
  chat_template::CheckpointChatTemplate ct{"test", *std::move(t)};
  ct.source = source;
  return ct;
}

// The syntax DeepSeek's own templates write tool calls in (fetched by
// tools/fetch_deepseek_tokenizers.sh; DeepSeek's files are not committed).
TEST(ToolPromptTest, DetectsTheCallSyntaxOfDeepSeeksTemplates) {
  const std::string dir = "tests/fixtures/chat_template/";
  const std::vector<std::pair<std::string, std::optional<ToolCallFormat>>> want = {
      {"deepseek_v2", std::nullopt},
      {"deepseek_v2_5", ToolCallFormat::kDeepseekV3},
      {"deepseek_v3", ToolCallFormat::kDeepseekV3},
      {"deepseek_r1", ToolCallFormat::kDeepseekV3},
      {"deepseek_v3_1", ToolCallFormat::kDeepseekV31}};
  for (const auto& [name, format] : want) {
    if (!std::filesystem::exists(dir + name + "/tokenizer_config.json")) {
      GTEST_SKIP() << dir << name << " not fetched: run tools/fetch_deepseek_tokenizers.sh";
    }
    absl::StatusOr<chat_template::CheckpointChatTemplate> ct = chat_template::LoadChatTemplate(dir + name, "deepseek_v3", "");
    ASSERT_TRUE(ct.ok()) << ct.status();
    EXPECT_EQ(DetectToolCallFormat(*ct), format) << name;
    // None of them renders the tool definitions: the router writes them.
    EXPECT_FALSE(ct->tmpl->ReadsVariable("tools")) << name;
  }
}

TEST(ToolPromptTest, DetectsTheCallSyntaxOfOtherTemplates) {
  EXPECT_EQ(DetectToolCallFormat(chat_template::CheckpointChatTemplate{"V3.2", std::nullopt}),
            ToolCallFormat::kDeepseekV32);
  EXPECT_EQ(DetectToolCallFormat(FromSource("{{ '<｜DSML｜function_calls>' }}")), ToolCallFormat::kDeepseekV32);
  EXPECT_EQ(DetectToolCallFormat(FromSource("{{ tool.type + '<｜tool▁sep｜>' + tool.function.name }}")),
            ToolCallFormat::kDeepseekV3);
  EXPECT_EQ(DetectToolCallFormat(FromSource("{{ 'say function<｜tool▁sep｜>NAME' }}")), ToolCallFormat::kDeepseekV3);
  EXPECT_EQ(DetectToolCallFormat(FromSource("{{ '<｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>' }}")),
            ToolCallFormat::kDeepseekV31);
  EXPECT_EQ(DetectToolCallFormat(FromSource("{{ messages }}")), std::nullopt);
}

// Moonshot's syntax, in the Kimi-style template of the kimi_k2 / moonlight fixtures (which reads
// `tools`: the definitions go to the template, not the system prompt) and in a bare one.
TEST(ToolPromptTest, DetectsKimisCallSyntax) {
  for (const std::string fixture : {"kimi_k2_tiktoken", "moonlight_tiktoken"}) {
    absl::StatusOr<chat_template::CheckpointChatTemplate> ct =
        chat_template::LoadChatTemplate("tests/fixtures/models/" + fixture, "kimi_k2", "");
    ASSERT_TRUE(ct.ok()) << ct.status();
    EXPECT_EQ(DetectToolCallFormat(*ct), ToolCallFormat::kKimiK2) << fixture;
    EXPECT_TRUE(ct->tmpl->ReadsVariable("tools")) << fixture;
  }
  EXPECT_EQ(DetectToolCallFormat(FromSource("{{ '<|tool_calls_section_begin|><|tool_call_begin|>' + call.id }}")),
            ToolCallFormat::kKimiK2);
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "Café"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping"}}])");

// DeepSeek-V3.1's model card: "## Tools", an entry per tool with its schema as Python's
// json.dumps writes it, then the call format.
TEST(ToolPromptTest, V31SectionIsTheModelCardsLayout) {
  EXPECT_EQ(ToolsSection(ToolCallFormat::kDeepseekV31, kTools),
            "## Tools\nYou have access to the following tools:\n"
            "\n### get_weather\nDescription: Weather now.\n\nParameters: {\"type\": \"object\", \"properties\": "
            "{\"city\": {\"type\": \"string\", \"description\": \"Café\"}}, \"required\": [\"city\"]}\n"
            "\n### ping\nDescription: \n\nParameters: {}\n"
            "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
            "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\n"
            "Where:\n\n"
            "- `tool_call_name` must be an exact match to one of the available tools\n"
            "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
            "- For multiple tool calls, chain them directly without separators or spaces\n");
}

// V3 / R1: the same layout with the call syntax their templates render.
TEST(ToolPromptTest, V3SectionShowsV3sCallSyntax) {
  const std::string section = ToolsSection(ToolCallFormat::kDeepseekV3, kTools);
  EXPECT_THAT(section, HasSubstr("\n### ping\nDescription: \n\nParameters: {}\n"));
  EXPECT_THAT(section, HasSubstr("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>tool_call_name\n"
                                 "```json\ntool_call_arguments\n```<｜tool▁call▁end｜>"));
}

// For a --chat-template that does not render tools: the same layout with Kimi's call syntax.
TEST(ToolPromptTest, KimiSectionShowsKimisCallSyntax) {
  const std::string section = ToolsSection(ToolCallFormat::kKimiK2, kTools);
  EXPECT_THAT(section, ::testing::StartsWith("## Tools\nYou have access to the following tools:\n\n### get_weather\n"));
  EXPECT_THAT(section, HasSubstr("\n### ping\nDescription: \n\nParameters: {}\n"));
  EXPECT_THAT(section, HasSubstr("<|tool_calls_section_begin|><|tool_call_begin|>functions.tool_call_name:"
                                 "tool_call_index<|tool_call_argument_begin|>tool_call_arguments<|tool_call_end|>"
                                 "{{additional_tool_calls}}<|tool_calls_section_end|>\n"));
  EXPECT_THAT(section, HasSubstr("- `tool_call_index` counts the tool calls of the conversation, from 0\n"));
}

TEST(ToolPromptTest, HistoryCallIdsInOrder) {
  const Json messages = Json::parse(R"([
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
      {"type": "function", "function": {"name": "ping", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
    {"role": "assistant", "content": "ok", "tool_calls": [
      {"id": 7, "type": "function", "function": {"name": "ping", "arguments": "{}"}},
      {"id": "call_abc", "type": "function", "function": {"name": "ping", "arguments": "{}"}}]}])");
  EXPECT_EQ(HistoryCallIds(messages), (std::vector<std::string>{"functions.get_weather:0", "", "", "call_abc"}));
  EXPECT_TRUE(HistoryCallIds(Json::array({Json{{"role", "user"}, {"content", "x"}}})).empty());
}

TEST(ToolPromptTest, SectionEndsTheSystemPrompt) {
  const Json user = Json{{"role", "user"}, {"content", "Hi"}};
  Json m = WithToolsSection(Json::array({user}), "TOOLS");
  EXPECT_EQ(m, Json::array({Json{{"role", "system"}, {"content", "TOOLS"}}, user}));
  m = WithToolsSection(Json::array({Json{{"role", "system"}, {"content", "A"}}, user,
                                    Json{{"role", "system"}, {"content", "B"}}}),
                       "TOOLS");
  EXPECT_EQ(m[0]["content"], "A");
  EXPECT_EQ(m[2]["content"], "B\n\nTOOLS");
  m = WithToolsSection(Json::array({Json{{"role", "system"}, {"content", nullptr}}, user}), "TOOLS");
  EXPECT_EQ(m[0]["content"], "TOOLS");
}

}  // namespace
}  // namespace mlaserve::router::openai
