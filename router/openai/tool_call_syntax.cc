#include "router/openai/tool_call_syntax.h"

#include <utility>

namespace mlaserve::router::openai {
namespace {

using tool_call_syntax::Concat;
using tool_call_syntax::kNameAttribute;
using tool_call_syntax::kTagEnd;

// deepseek_v3 / deepseek_v31.
constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kToolSep = "<｜tool▁sep｜>";
constexpr std::string_view kV3JsonFence = "\n```json\n";
constexpr std::string_view kV3FencedCallEnd = "\n```<｜tool▁call▁end｜>";
constexpr std::string_view kV3FencedCallsEnd = "\n```<｜tool▁calls▁end｜>";
// deepseek_v32 (DSML). The blank line belongs to the opening, as in DeepSeek's decoder.
constexpr std::string_view kDsmlOpen = "\n\n<｜DSML｜function_calls>";
constexpr std::string_view kDsmlBareOpen = "<｜DSML｜function_calls>";
constexpr std::string_view kDsmlClose = "</｜DSML｜function_calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
constexpr std::string_view kParamOpen = "<｜DSML｜parameter";
constexpr std::string_view kParamClose = "</｜DSML｜parameter>";
// kimi_k2 (Moonshot's special tokens). The singular section markers are what some Kimi
// outputs write instead (vLLM's parser takes them too).
constexpr std::string_view kSectionBegin = "<|tool_calls_section_begin|>";
constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kSingularSectionBegin = "<|tool_call_section_begin|>";
constexpr std::string_view kSingularSectionEnd = "<|tool_call_section_end|>";
constexpr std::string_view kKimiCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kKimiArgumentBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kKimiCallEnd = "<|tool_call_end|>";

}  // namespace

// What each state looks for. No marker of a list may occur inside a proper prefix of
// another one of the same list (FindMarker stops at the first possible prefix).
std::span<const ToolCallParser::Marker> ToolCallParser::Markers(ToolCallFormat format, State state) {
  using A = Action;
  static constexpr Marker kV3Text[] = {{kCallsBegin, A::kOpenBlock}};
  static constexpr Marker kV3Block[] = {{kCallBegin, A::kOpenCall}, {kCallsEnd, A::kCloseBlock}};
  static constexpr Marker kV3Type[] = {{kToolSep, A::kTypeEnd},
                                       {kCallBegin, A::kHeaderFailed},
                                       {kCallEnd, A::kHeaderFailed},
                                       {kCallsEnd, A::kHeaderFailed}};
  static constexpr Marker kV3Name[] = {{kV3JsonFence, A::kNameEnd},
                                       {kCallBegin, A::kHeaderFailed},
                                       {kCallEnd, A::kHeaderFailed},
                                       {kCallsEnd, A::kHeaderFailed}};
  static constexpr Marker kV3Args[] = {{kV3FencedCallEnd, A::kCloseCall},
                                       {kCallEnd, A::kCloseCall},
                                       {kV3FencedCallsEnd, A::kCloseCallAndBlock},
                                       {kCallsEnd, A::kCloseCallAndBlock}};
  static constexpr Marker kV31Name[] = {{kToolSep, A::kNameEnd},
                                        {kCallBegin, A::kHeaderFailed},
                                        {kCallEnd, A::kHeaderFailed},
                                        {kCallsEnd, A::kHeaderFailed}};
  static constexpr Marker kV31Args[] = {{kCallEnd, A::kCloseCall}, {kCallsEnd, A::kCloseCallAndBlock}};
  static constexpr Marker kV32Text[] = {{kDsmlOpen, A::kOpenBlock}, {kDsmlBareOpen, A::kOpenBlock}};
  static constexpr Marker kV32Block[] = {{kInvokeOpen, A::kOpenCall}, {kDsmlClose, A::kCloseBlock}};
  static constexpr Marker kV32Name[] = {{kTagEnd, A::kNameEnd},
                                        {kInvokeOpen, A::kHeaderFailed},
                                        {kInvokeClose, A::kHeaderFailed},
                                        {kParamOpen, A::kHeaderFailed},
                                        {kDsmlClose, A::kHeaderFailed}};
  static constexpr Marker kV32Invoke[] = {
      {kParamOpen, A::kOpenParam}, {kInvokeClose, A::kCloseCall}, {kDsmlClose, A::kCloseCallAndBlock}};
  static constexpr Marker kV32ParamHeader[] = {{kTagEnd, A::kParamTagEnd},
                                               {kParamOpen, A::kHeaderFailed},
                                               {kParamClose, A::kHeaderFailed},
                                               {kInvokeOpen, A::kHeaderFailed},
                                               {kInvokeClose, A::kHeaderFailed},
                                               {kDsmlClose, A::kHeaderFailed}};
  static constexpr Marker kV32ParamValue[] = {{kParamClose, A::kCloseParam}};
  static constexpr Marker kKimiText[] = {{kSectionBegin, A::kOpenBlock}, {kSingularSectionBegin, A::kOpenBlock}};
  static constexpr Marker kKimiBlock[] = {
      {kKimiCallBegin, A::kOpenCall}, {kSectionEnd, A::kCloseBlock}, {kSingularSectionEnd, A::kCloseBlock}};
  static constexpr Marker kKimiName[] = {{kKimiArgumentBegin, A::kNameEnd},
                                         {kKimiCallBegin, A::kHeaderFailed},
                                         {kKimiCallEnd, A::kHeaderFailed},
                                         {kSectionEnd, A::kHeaderFailed},
                                         {kSingularSectionEnd, A::kHeaderFailed}};
  static constexpr Marker kKimiArgs[] = {{kKimiCallEnd, A::kCloseCall},
                                         {kSectionEnd, A::kCloseCallAndBlock},
                                         {kSingularSectionEnd, A::kCloseCallAndBlock},
                                         {kKimiCallBegin, A::kCloseCallAndOpenNext}};

  using Span = std::span<const Marker>;
  if (format == ToolCallFormat::kKimiK2) {
    switch (state) {
      case State::kText: return kKimiText;
      case State::kBlock: return kKimiBlock;
      case State::kCallName: return kKimiName;
      case State::kArgs: return kKimiArgs;
      default: return {};  // not a state of this format
    }
  }
  const bool v32 = format == ToolCallFormat::kDeepseekV32;
  const bool v3 = format == ToolCallFormat::kDeepseekV3;
  switch (state) {
    case State::kText: return v32 ? Span(kV32Text) : Span(kV3Text);
    case State::kBlock: return v32 ? Span(kV32Block) : Span(kV3Block);
    case State::kCallType: return kV3Type;
    case State::kCallName: return v32 ? Span(kV32Name) : v3 ? Span(kV3Name) : Span(kV31Name);
    case State::kArgs: return v3 ? Span(kV3Args) : Span(kV31Args);
    case State::kInvoke: return kV32Invoke;
    case State::kParamHeader: return kV32ParamHeader;
    case State::kParamValue: return kV32ParamValue;
  }
  return {};
}

ToolCallParser::Found ToolCallParser::FindMarker(std::string_view text, std::span<const Marker> markers) {
  // Only positions holding a marker's first byte are tried, so a scan is linear.
  char firsts[8];
  size_t n = 0;
  for (const Marker& m : markers) {
    if (std::string_view(firsts, n).find(m.text[0]) == std::string_view::npos) firsts[n++] = m.text[0];
  }
  const std::string_view first_bytes(firsts, n);
  for (size_t i = text.find_first_of(first_bytes); i != std::string_view::npos;
       i = text.find_first_of(first_bytes, i + 1)) {
    const std::string_view rest = text.substr(i);
    bool prefix = false;
    for (const Marker& m : markers) {
      if (rest.starts_with(m.text)) return {i, &m};
      prefix = prefix || m.text.starts_with(rest);
    }
    if (prefix) return {i, nullptr};
  }
  return {text.size(), nullptr};
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kDeepseekV3: return "deepseek_v3";
    case ToolCallFormat::kDeepseekV31: return "deepseek_v31";
    case ToolCallFormat::kDeepseekV32: return "deepseek_v32";
    case ToolCallFormat::kKimiK2: return "kimi_k2";
  }
  return "unknown";
}

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  for (const ToolCallFormat f : kToolCallFormats) {
    if (ToolCallFormatName(f) == name) return f;
  }
  return std::nullopt;
}

std::string ToolCallParser::CallOpening(ToolCallFormat format, const std::optional<std::string>& name,
                                        std::vector<std::string> history_call_ids) {
  switch (format) {
    case ToolCallFormat::kDeepseekV3:
      return name ? Concat({kCallsBegin, kCallBegin, "function", kToolSep, *name, kV3JsonFence})
                  : Concat({kCallsBegin, kCallBegin, "function", kToolSep});
    case ToolCallFormat::kDeepseekV31:
      return name ? Concat({kCallsBegin, kCallBegin, *name, kToolSep}) : Concat({kCallsBegin, kCallBegin});
    case ToolCallFormat::kDeepseekV32:
      return name ? Concat({kDsmlOpen, "\n", kInvokeOpen, " ", kNameAttribute, *name, kTagEnd, "\n"})
                  : Concat({kDsmlOpen, "\n", kInvokeOpen, " ", kNameAttribute});
    case ToolCallFormat::kKimiK2: {
      if (!name) return Concat({kSectionBegin, kKimiCallBegin});
      const std::string id = KimiCallIds(std::move(history_call_ids)).Take(*name, "");
      return Concat({kSectionBegin, kKimiCallBegin, id, kKimiArgumentBegin});
    }
  }
  return "";
}

std::optional<std::string_view> ToolCallParser::ArgumentsStart(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kDeepseekV3: return kV3JsonFence;
    case ToolCallFormat::kDeepseekV31: return kToolSep;
    case ToolCallFormat::kDeepseekV32: return std::nullopt;
    case ToolCallFormat::kKimiK2: return kKimiArgumentBegin;
  }
  return std::nullopt;
}

std::vector<std::string> ToolCallParser::ReasoningEndingOpenings(ToolCallFormat format) {
  if (format != ToolCallFormat::kKimiK2) return {};
  return {std::string(kSectionBegin), std::string(kSingularSectionBegin)};
}

std::string ToolCallParser::RequiredCallPrefix(ToolCallFormat format, const std::string& name,
                                               std::vector<std::string> history_call_ids) {
  const std::optional<std::string_view> start = ArgumentsStart(format);
  if (!start.has_value()) return Concat({name, kTagEnd});  // DSML: the invoke tag's end
  if (format == ToolCallFormat::kKimiK2) {
    return Concat({KimiCallIds(std::move(history_call_ids)).Take(name, ""), *start});
  }
  return Concat({name, *start});
}

}  // namespace mlaserve::router::openai
