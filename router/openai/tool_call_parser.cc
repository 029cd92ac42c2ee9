#include "router/openai/tool_call_parser.h"

#include <cstdio>
#include <initializer_list>
#include <utility>

namespace mlaserve::router::openai {
namespace {

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
constexpr std::string_view kTagEnd = "\">";
constexpr std::string_view kStringAttribute = "\" string=\"";
constexpr std::string_view kNameAttribute = "name=\"";
// kimi_k2 (Moonshot's special tokens). The singular section markers are what some Kimi
// outputs write instead (vLLM's parser takes them too).
constexpr std::string_view kSectionBegin = "<|tool_calls_section_begin|>";
constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kSingularSectionBegin = "<|tool_call_section_begin|>";
constexpr std::string_view kSingularSectionEnd = "<|tool_call_section_end|>";
constexpr std::string_view kKimiCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kKimiArgumentBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kKimiCallEnd = "<|tool_call_end|>";

// The largest m <= n where text[0, m) does not end inside a UTF-8 character, so that no
// delta splits one. Invalid UTF-8 passes as is.
size_t Utf8Boundary(std::string_view text, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (c < 0xC0) return n;            // ASCII
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    return length > back ? n - back : n;
  }
  return n;
}

// As Python's json.dumps(ensure_ascii=False) escapes a string's characters; byte by byte,
// so bytes of multi-byte characters (>= 0x80) pass unchanged.
void AppendJsonEscaped(std::string_view text, std::string* out) {
  for (const char c : text) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          *out += escaped;
        } else {
          out->push_back(c);
        }
    }
  }
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

bool IsAsciiWhitespace(std::string_view text) {
  for (const char c : text) {
    if (!IsSpace(c)) return false;
  }
  return true;
}

std::string_view StripLeadingSpace(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  return text;
}

// Joins pieces (absl::StrCat here takes absl::string_view, not std::string_view).
std::string Concat(std::initializer_list<std::string_view> pieces) {
  std::string out;
  for (const std::string_view p : pieces) out.append(p);
  return out;
}

// The NAME of an invoke tag's ` name="NAME` (the text between "<｜DSML｜invoke" and `">`).
std::optional<std::string> InvokeName(std::string_view header) {
  header = StripLeadingSpace(header);
  if (!header.starts_with(kNameAttribute)) return std::nullopt;
  return std::string(header.substr(kNameAttribute.size()));
}

struct ParamTag {
  std::string key;
  bool is_string = false;
};

// ` name="KEY" string="true|false` (the text between "<｜DSML｜parameter" and `">`). The last
// ` string="` splits it, so a key may contain one.
std::optional<ParamTag> ParseParamTag(std::string_view header) {
  header = StripLeadingSpace(header);
  if (!header.starts_with(kNameAttribute)) return std::nullopt;
  header.remove_prefix(kNameAttribute.size());
  const size_t split = header.rfind(kStringAttribute);
  if (split == std::string_view::npos) return std::nullopt;
  const std::string_view value = header.substr(split + kStringAttribute.size());
  if (value != "true" && value != "false") return std::nullopt;
  return ParamTag{std::string(header.substr(0, split)), value == "true"};
}

}  // namespace

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

ToolCallParser::ToolCallParser(ToolCallFormat format, std::vector<std::string> history_call_ids)
    : format_(format), kimi_ids_(std::move(history_call_ids)) {}

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

ToolCallParser::Delta ToolCallParser::Add(std::string_view text) {
  delta_ = {};
  buffer_.append(text);
  Run(/*final=*/false);
  return std::exchange(delta_, {});
}

ToolCallParser::Delta ToolCallParser::Finish() {
  delta_ = {};
  Run(/*final=*/true);
  OnEnd();
  return std::exchange(delta_, {});
}

void ToolCallParser::Run(bool final) {
  std::string_view rest = buffer_;
  for (;;) {
    const Found found = FindMarker(rest, Markers(format_, state_));
    if (found.marker != nullptr) {
      OnText(rest.substr(0, found.at));
      rest.remove_prefix(found.at);
      if (OnMarker(*found.marker)) rest.remove_prefix(found.marker->text.size());
      continue;
    }
    if (!final) {
      const size_t decided = Utf8Boundary(rest, found.at);
      OnText(rest.substr(0, decided));
      rest.remove_prefix(decided);
      break;
    }
    OnText(rest.substr(0, found.at));
    // A tail that could have been the start of the arguments' end marker most likely was.
    if (state_ != State::kArgs && state_ != State::kParamValue) OnText(rest.substr(found.at));
    rest = {};
    break;
  }
  buffer_.erase(0, buffer_.size() - rest.size());
}

void ToolCallParser::OnText(std::string_view text) {
  if (text.empty()) return;
  switch (state_) {
    case State::kText: EmitContent(text); break;
    case State::kBlock:
      if (!block_named_) block_raw_.append(text);
      Stray(text);
      break;
    case State::kInvoke: Stray(text); break;
    case State::kCallType: Record(text); break;
    case State::kCallName:
    case State::kParamHeader:
      Record(text);
      header_.append(text);
      break;
    case State::kArgs:
      if (format_ == ToolCallFormat::kKimiK2) {
        OnKimiArguments(text);
      } else {
        EmitArguments(text);
      }
      break;
    case State::kParamValue:
      if (string_value_) {
        std::string escaped;
        AppendJsonEscaped(text, &escaped);
        EmitArguments(escaped);
      } else {
        EmitArguments(text);
      }
      break;
  }
}

bool ToolCallParser::OnMarker(const Marker& marker) {
  const bool v32 = format_ == ToolCallFormat::kDeepseekV32;
  switch (marker.action) {
    case Action::kOpenBlock:
      OpenBlock(marker.text);
      return true;
    case Action::kCloseBlock:
      EndSegment();
      CloseBlock(marker.text);
      return true;
    case Action::kOpenCall:
      EndSegment();
      unit_raw_.clear();
      header_.clear();
      Record(marker.text);
      state_ = format_ == ToolCallFormat::kDeepseekV3 ? State::kCallType : State::kCallName;
      return true;
    case Action::kTypeEnd:  // v3's type ("function") says nothing we need
      Record(marker.text);
      header_.clear();
      state_ = State::kCallName;
      return true;
    case Action::kNameEnd: {
      Record(marker.text);
      const bool kimi = format_ == ToolCallFormat::kKimiK2;
      std::optional<std::string> name = v32    ? InvokeName(header_)
                                        : kimi ? KimiCallName(header_)
                                               : std::optional<std::string>(header_);
      if (!name || name->empty()) {
        UnitFailed();
        return true;
      }
      std::optional<std::string> id;
      if (kimi) id = kimi_ids_.Take(*name, header_);
      StartCall(*std::move(name), std::move(id));
      state_ = v32 ? State::kInvoke : State::kArgs;
      params_ = 0;
      return true;
    }
    case Action::kHeaderFailed:
      UnitFailed();
      return false;
    case Action::kCloseCall:
    case Action::kCloseCallAndBlock:
      if (v32) EmitArguments(params_ == 0 ? "{}" : "}");
      EndSegment();
      state_ = State::kBlock;
      if (marker.action == Action::kCloseCallAndBlock) CloseBlock(marker.text);
      return true;
    case Action::kCloseCallAndOpenNext:
      EndSegment();
      state_ = State::kBlock;
      return false;
    case Action::kOpenParam:
      EndSegment();
      unit_raw_.clear();
      header_.clear();
      Record(marker.text);
      state_ = State::kParamHeader;
      return true;
    case Action::kParamTagEnd: {
      Record(marker.text);
      const std::optional<ParamTag> tag = ParseParamTag(header_);
      if (!tag) {
        UnitFailed();
        return true;
      }
      std::string opening(params_ == 0 ? "{\"" : ", \"");
      AppendJsonEscaped(tag->key, &opening);
      opening += tag->is_string ? "\": \"" : "\": ";
      EmitArguments(opening);
      ++params_;
      string_value_ = tag->is_string;
      unit_raw_.clear();
      state_ = State::kParamValue;
      return true;
    }
    case Action::kCloseParam:
      if (string_value_) EmitArguments("\"");
      state_ = State::kInvoke;
      return true;
  }
  return true;
}

void ToolCallParser::OnEnd() {
  switch (state_) {
    case State::kBlock:
      if (!block_named_) EmitContent(block_raw_);
      break;
    case State::kCallType:
    case State::kCallName:
      EmitContent(block_named_ ? unit_raw_ : block_raw_);
      break;
    case State::kParamHeader: EmitContent(unit_raw_); break;
    case State::kText:
    case State::kArgs:
    case State::kInvoke:
    case State::kParamValue: break;  // a started call keeps what it streamed
  }
  state_ = State::kText;
  block_named_ = false;
  block_raw_.clear();
  stray_.clear();
  unit_raw_.clear();
  header_.clear();
  EndSegment();
}

void ToolCallParser::Record(std::string_view raw) {
  unit_raw_.append(raw);
  if (!block_named_) block_raw_.append(raw);
}

void ToolCallParser::Stray(std::string_view text) {
  if (text.empty()) return;
  // Before the block's first call, stray text waits with the raw block: it is content
  // either way, but must not overtake the raw block's earlier text.
  std::string& out = block_named_ ? delta_.content : stray_;
  if (!segment_is_stray_) {
    if (IsAsciiWhitespace(text)) {
      segment_ws_.append(text);
      return;
    }
    out += segment_ws_;
    segment_ws_.clear();
    segment_is_stray_ = true;
  }
  out.append(text);
}

void ToolCallParser::EndSegment() {
  segment_ws_.clear();
  segment_is_stray_ = false;
}

void ToolCallParser::UnitFailed() {
  state_ = state_ == State::kParamHeader ? State::kInvoke : State::kBlock;
  EndSegment();
  Stray(unit_raw_);  // starts with a marker, so it is never whitespace only
  unit_raw_.clear();
  header_.clear();
}

void ToolCallParser::OpenBlock(std::string_view marker) {
  state_ = State::kBlock;
  block_named_ = false;
  block_raw_.assign(marker);
  stray_.clear();
  EndSegment();
}

void ToolCallParser::CloseBlock(std::string_view marker) {
  if (!block_named_) EmitContent(Concat({block_raw_, marker}));
  state_ = State::kText;
  block_named_ = false;
  block_raw_.clear();
  stray_.clear();
  EndSegment();
}

void ToolCallParser::OnKimiArguments(std::string_view text) {
  if (!args_begun_) {
    text = StripLeadingSpace(text);
    if (text.empty()) return;
    args_begun_ = true;
  }
  size_t end = text.size();
  while (end > 0 && IsSpace(text[end - 1])) --end;
  if (end > 0) {
    EmitArguments(Concat({args_space_, text.substr(0, end)}));
    args_space_.clear();
  }
  args_space_.append(text.substr(end));
}

void ToolCallParser::StartCall(std::string name, std::optional<std::string> id) {
  if (!block_named_) {
    EmitContent(stray_);
    stray_.clear();
    block_raw_.clear();
    block_named_ = true;
  }
  unit_raw_.clear();
  header_.clear();
  EndSegment();
  args_begun_ = false;
  args_space_.clear();
  calls_.push_back({name, "", id.value_or("")});
  delta_.calls.push_back({static_cast<int>(calls_.size()) - 1, std::move(name), "", std::move(id)});
}

void ToolCallParser::EmitArguments(std::string_view fragment) {
  if (fragment.empty()) return;
  const int index = static_cast<int>(calls_.size()) - 1;
  calls_.back().arguments.append(fragment);
  if (delta_.calls.empty() || delta_.calls.back().index != index) delta_.calls.push_back({index, std::nullopt, "", std::nullopt});
  delta_.calls.back().arguments.append(fragment);
}

void ToolCallParser::EmitContent(std::string_view text) { delta_.content.append(text); }

}  // namespace mlaserve::router::openai
