// Test helpers for ToolCallParser: feeding an output whole, split in two at every byte and byte
// by byte, checking the streaming contract (tool_call_parser.h) on the way.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {

inline bool operator==(const ToolCall& a, const ToolCall& b) {
  return a.name == b.name && a.arguments == b.arguments && a.id == b.id;
}
inline void PrintTo(const ToolCall& c, std::ostream* os) {
  *os << c.name << " " << c.arguments;
  if (!c.id.empty()) *os << " id " << c.id;
}

namespace tool_call_testing {

inline bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

struct Result {
  std::string content;
  std::vector<ToolCall> calls;     // calls()
  std::vector<ToolCall> streamed;  // the deltas joined per index (ids from the first ones)
  bool operator==(const Result&) const = default;
};
inline void PrintTo(const Result& r, std::ostream* os) {
  *os << "content " << ::testing::PrintToString(r.content) << ", calls " << ::testing::PrintToString(r.calls)
      << ", streamed " << ::testing::PrintToString(r.streamed);
}

// Feeds the pieces and checks the delta contract: a call's name exactly once, on its first
// delta (with its id exactly where the format has ids), indexes in order; with `utf8`, no
// delta splits a character.
inline Result Parse(ToolCallFormat format, const std::vector<std::string_view>& pieces, bool utf8 = false,
                    const std::vector<std::string>& history_call_ids = {}) {
  ToolCallParser parser(format, history_call_ids);
  Result r;
  auto take = [&](const ToolCallParser::Delta& d) {
    r.content += d.content;
    if (utf8) EXPECT_TRUE(IsUtf8(d.content)) << ::testing::PrintToString(d.content);
    int last = -1;
    for (const ToolCallDelta& c : d.calls) {
      EXPECT_GT(c.index, last);
      last = c.index;
      if (c.index == static_cast<int>(r.streamed.size())) {
        EXPECT_TRUE(c.name.has_value()) << "call " << c.index << "'s first delta has no name";
        EXPECT_EQ(c.id.has_value(), format == ToolCallFormat::kKimiK2) << "call " << c.index << "'s id";
        r.streamed.push_back({c.name.value_or(""), "", c.id.value_or("")});
      } else {
        ASSERT_LT(c.index, static_cast<int>(r.streamed.size())) << "indexes skip";
        EXPECT_FALSE(c.name.has_value()) << "call " << c.index << "'s name came twice";
        EXPECT_FALSE(c.id.has_value()) << "call " << c.index << "'s id came twice";
      }
      if (utf8) EXPECT_TRUE(IsUtf8(c.arguments)) << ::testing::PrintToString(c.arguments);
      r.streamed[c.index].arguments += c.arguments;
    }
  };
  for (const std::string_view piece : pieces) take(parser.Add(piece));
  take(parser.Finish());
  r.calls = parser.calls();
  return r;
}

inline std::vector<std::string_view> Bytes(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size(); ++i) out.push_back(text.substr(i, 1));
  return out;
}

// The one-piece result, after checking every 2-split and byte-by-byte feeding give it too.
inline Result ParseEveryWay(ToolCallFormat format, std::string_view text,
                            const std::vector<std::string>& history_call_ids = {}) {
  const Result whole = Parse(format, {text}, false, history_call_ids);
  EXPECT_EQ(whole.streamed, whole.calls);
  const bool utf8 = IsUtf8(text);
  for (size_t i = 1; i < text.size(); ++i) {
    const Result split = Parse(format, {text.substr(0, i), text.substr(i)}, utf8, history_call_ids);
    if (split != whole) {
      ADD_FAILURE() << "split at " << i << " of " << ::testing::PrintToString(text) << ": "
                    << ::testing::PrintToString(split) << " vs " << ::testing::PrintToString(whole);
      break;
    }
  }
  EXPECT_EQ(Parse(format, Bytes(text), utf8, history_call_ids), whole)
      << "byte by byte: " << ::testing::PrintToString(text);
  return whole;
}

struct Case {
  std::string label;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;
};

inline void ExpectCases(ToolCallFormat format, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(ToolCallFormatName(format)) + " / " + c.label);
    const Result r = ParseEveryWay(format, c.text);
    EXPECT_EQ(r.content, c.content);
    EXPECT_EQ(r.calls, c.calls);
  }
}

}  // namespace tool_call_testing
}  // namespace mlaserve::router::openai
