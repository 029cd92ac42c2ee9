#include "router/openai/tool_call_parser.h"

#include <cstdio>
#include <utility>

#include "router/openai/tool_call_syntax.h"

namespace mlaserve::router::openai {
namespace {

using tool_call_syntax::Concat;
using tool_call_syntax::kNameAttribute;
using tool_call_syntax::kStringAttribute;

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

ToolCallParser::ToolCallParser(ToolCallFormat format, std::vector<std::string> history_call_ids)
    : format_(format), kimi_ids_(std::move(history_call_ids)) {}

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
  if (delta_.calls.empty() || delta_.calls.back().index != index) {
    delta_.calls.push_back({index, std::nullopt, "", std::nullopt});
  }
  delta_.calls.back().arguments.append(fragment);
}

void ToolCallParser::EmitContent(std::string_view text) { delta_.content.append(text); }

}  // namespace mlaserve::router::openai
