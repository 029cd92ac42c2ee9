#include "router/openai/reasoning_splitter.h"

#include "gtest/gtest.h"

namespace mlaserve::router::openai {
namespace {

// Feeds `pieces` and returns reasoning|content, pieces joined.
std::pair<std::string, std::string> Split(bool opens, const std::vector<std::string>& pieces,
                                          std::vector<std::string> openers = {}) {
  ReasoningSplitter s(opens);
  s.set_content_openers(std::move(openers));
  std::string reasoning, content;
  for (const std::string& p : pieces) {
    ReasoningSplitter::Delta d = s.Add(p);
    reasoning += d.reasoning;
    content += d.content;
  }
  ReasoningSplitter::Delta d = s.Finish();
  return {reasoning + d.reasoning, content + d.content};
}

TEST(ReasoningSplitterTest, SplitsAtCloseTagAcrossPieces) {
  EXPECT_EQ(Split(true, {"let me ", "think</th", "ink>\n\nAnswer"}),
            std::make_pair(std::string("let me think"), std::string("\n\nAnswer")));
  EXPECT_EQ(Split(true, {"a</think>b</think>c"}), std::make_pair(std::string("a"), std::string("b</think>c")));
  EXPECT_EQ(Split(true, {"no end <", "/thi"}), std::make_pair(std::string("no end </thi"), std::string()));
}

TEST(ReasoningSplitterTest, OutputThatOpensThinkItself) {
  EXPECT_EQ(Split(false, {"<th", "ink>r</think>c"}), std::make_pair(std::string("r"), std::string("c")));
  EXPECT_EQ(Split(false, {"plain answer"}), std::make_pair(std::string(), std::string("plain answer")));
  EXPECT_EQ(Split(false, {"<t"}), std::make_pair(std::string(), std::string("<t")));
  ReasoningSplitter s(false);
  s.Add("plain");
  EXPECT_FALSE(s.in_reasoning_mode());
}

// Kimi-K2-Thinking: its template leaves the prompt at <|im_middle|>, the model opens <think>
// itself, and may end its thinking by opening a tool-call section, which stays in the content.
TEST(ReasoningSplitterTest, KimiThinkingOpensThinkItselfAndMayEndItWithACallSection) {
  const std::string section = "<|tool_calls_section_begin|>";
  const std::vector<std::string> kimi = {section, "<|tool_call_section_begin|>"};
  EXPECT_EQ(Split(false, {"<think>", "which tool?", "</think>", "Paris."}, kimi),
            std::make_pair(std::string("which tool?"), std::string("Paris.")));
  EXPECT_EQ(Split(false, {"<think>weather", "<|tool_calls_sec", "tion_begin|><|tool_call_begin|>"}, kimi),
            std::make_pair(std::string("weather"), section + "<|tool_call_begin|>"));
  EXPECT_EQ(Split(false, {"<think>a<|tool_call_section_begin|>b</think>c"}, kimi),
            std::make_pair(std::string("a"), std::string("<|tool_call_section_begin|>b</think>c")));
  // After </think>, a section is content as any text is; without openers it is reasoning.
  EXPECT_EQ(Split(false, {"<think>a</think>", section}, kimi), std::make_pair(std::string("a"), section));
  EXPECT_EQ(Split(false, {"<think>a", section}), std::make_pair("a" + section, std::string()));
  // A held-back partial opener that never completes is reasoning.
  EXPECT_EQ(Split(false, {"<think>a<|tool_calls"}, kimi), std::make_pair(std::string("a<|tool_calls"), std::string()));
}

TEST(ReasoningSplitterTest, PromptOpensReasoning) {
  EXPECT_TRUE(ReasoningSplitter::PromptOpensReasoning("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<｜User｜>hi<｜Assistant｜></think>"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<｜User｜>hi<｜Assistant｜>"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<think>x</think> and more"));
}

}  // namespace
}  // namespace mlaserve::router::openai
