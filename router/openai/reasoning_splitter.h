// ReasoningSplitter: splits a reasoning model's streamed output into `reasoning_content` and
// `content` at the first "</think>", as DeepSeek's API and vLLM's deepseek_r1 parser return
// R1-style output. Used when the rendered prompt ends inside an open <think> (R1's template
// ends with "<｜Assistant｜><think>\n"; V3.1's with "<think>" when thinking is on); an output
// that itself starts with "<think>" is handled too (the tag is dropped): Kimi-K2-Thinking's
// template leaves the prompt at "<|im_middle|>" and the model opens its own <think>. Some
// models also end their thinking by starting a tool-call block without "</think>" (Kimi-K2-
// Thinking with <|tool_calls_section_begin|>, as vLLM's kimi_k2 reasoning parser reads it):
// such openings (set_content_openers) end the reasoning and stay in the content, where the
// tool-call parser finds them. Text that may be the start of a tag is held back until the next
// piece decides it.
// One per response; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::router::openai {

class ReasoningSplitter {
 public:
  static constexpr std::string_view kReasoningEnd = "</think>";

  // `prompt_opens_reasoning`: the prompt left a <think> open, so output starts as reasoning.
  explicit ReasoningSplitter(bool prompt_opens_reasoning);

  struct Delta {
    std::string reasoning;
    std::string content;
  };
  // Texts that end the reasoning as "</think>" does but belong to the content.
  void set_content_openers(std::vector<std::string> openers) { openers_ = std::move(openers); }

  Delta Add(std::string_view text);
  Delta Finish();  // releases held-back text

  // Whether "</think>" was seen (content started). Until then the response's content is
  // null in reasoning mode.
  bool reasoning_ended() const { return state_ == State::kContent; }
  bool in_reasoning_mode() const { return reasoning_mode_; }

  // True when `prompt` ends with an open <think> (trailing whitespace ignored).
  static bool PromptOpensReasoning(std::string_view prompt);

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_;
  bool reasoning_mode_;
  std::string held_;
  std::vector<std::string> openers_;
};

}  // namespace mlaserve::router::openai
