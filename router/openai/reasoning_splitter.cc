#include "router/openai/reasoning_splitter.h"

#include <algorithm>

namespace mlaserve::router::openai {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = ReasoningSplitter::kReasoningEnd;

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool prompt_opens_reasoning)
    : state_(prompt_opens_reasoning ? State::kReasoning : State::kStart),
      reasoning_mode_(prompt_opens_reasoning) {}

bool ReasoningSplitter::PromptOpensReasoning(std::string_view prompt) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  if (end == std::string_view::npos) return false;
  const std::string_view trimmed = prompt.substr(0, end + 1);
  const size_t open = trimmed.rfind(kOpen);
  return open != std::string_view::npos && trimmed.find(kClose, open) == std::string_view::npos;
}

ReasoningSplitter::Delta ReasoningSplitter::Add(std::string_view text) {
  Delta out;
  held_.append(text);
  if (state_ == State::kStart) {
    // Undecided until the output is long enough to tell whether it starts with <think>.
    if (held_.size() < kOpen.size() && kOpen.substr(0, held_.size()) == held_) return out;
    if (held_.starts_with(kOpen)) {
      held_.erase(0, kOpen.size());
      state_ = State::kReasoning;
      reasoning_mode_ = true;
    } else {
      state_ = State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    // The first of "</think>" (dropped) and the content openers (kept).
    size_t end = held_.find(kClose);
    size_t dropped = kClose.size();
    size_t keep = end == std::string::npos ? PartialTagSuffix(held_, kClose) : 0;
    for (const std::string& opener : openers_) {
      const size_t at = held_.find(opener);
      if (at != std::string::npos && (end == std::string::npos || at < end)) {
        end = at;
        dropped = 0;
      }
      if (end == std::string::npos) keep = std::max(keep, PartialTagSuffix(held_, opener));
    }
    if (end == std::string::npos) {
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, end);
    held_.erase(0, end + dropped);
    state_ = State::kContent;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplitter::Delta ReasoningSplitter::Finish() {
  Delta out;
  if (state_ == State::kReasoning) {
    out.reasoning = std::move(held_);
  } else {
    out.content = std::move(held_);  // kStart: a short output that never became "<think>"
  }
  held_.clear();
  return out;
}

}  // namespace mlaserve::router::openai
