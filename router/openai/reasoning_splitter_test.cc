#include "router/openai/reasoning_splitter.h"

#include "gtest/gtest.h"

namespace mlaserve::router::openai {
namespace {

// Feeds `pieces` and returns reasoning|content, pieces joined.
std::pair<std::string, std::string> Split(bool opens, const std::vector<std::string>& pieces) {
  ReasoningSplitter s(opens);
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

TEST(ReasoningSplitterTest, PromptOpensReasoning) {
  EXPECT_TRUE(ReasoningSplitter::PromptOpensReasoning("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<｜User｜>hi<｜Assistant｜></think>"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<｜User｜>hi<｜Assistant｜>"));
  EXPECT_FALSE(ReasoningSplitter::PromptOpensReasoning("<think>x</think> and more"));
}

}  // namespace
}  // namespace mlaserve::router::openai
