// What ToolCallParser's state machine (tool_call_parser.cc) and the formats' syntax
// (tool_call_syntax.cc: each format's markers, which of them each state looks for and what
// they do, the call openings of forced calls) share. Internal to those two files.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "router/openai/tool_call_parser.h"

namespace mlaserve::router::openai {
namespace tool_call_syntax {

// DSML's attributes (the parser reads them, the openings write them).
inline constexpr std::string_view kTagEnd = "\">";
inline constexpr std::string_view kStringAttribute = "\" string=\"";
inline constexpr std::string_view kNameAttribute = "name=\"";

// Joins pieces (absl::StrCat here takes absl::string_view, not std::string_view).
inline std::string Concat(std::initializer_list<std::string_view> pieces) {
  std::string out;
  for (const std::string_view p : pieces) out.append(p);
  return out;
}

}  // namespace tool_call_syntax

enum class ToolCallParser::Action : unsigned char {
  kOpenBlock,
  kCloseBlock,
  kOpenCall,
  kTypeEnd,
  kNameEnd,
  kHeaderFailed,  // a marker that cannot occur inside this header
  kCloseCall,
  kCloseCallAndBlock,
  kCloseCallAndOpenNext,  // kimi_k2: a call begins inside the arguments; the marker stays
  kOpenParam,
  kParamTagEnd,
  kCloseParam,
};

struct ToolCallParser::Marker {
  std::string_view text;
  Action action;
};

struct ToolCallParser::Found {
  size_t at;             // where the marker starts, or where a possible start is held back
  const Marker* marker;  // null: no complete marker in the text
};

}  // namespace mlaserve::router::openai
