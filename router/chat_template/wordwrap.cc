#include "router/chat_template/wordwrap.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/utf8.h"
#include "router/chat_template/python_str.h"

namespace mlaserve::router::chat_template {
namespace {

using Text = std::u32string;

// textwrap's _whitespace: ASCII only.
bool IsWs(char32_t c) { return c == '\t' || c == '\n' || c == 0x0B || c == 0x0C || c == '\r' || c == ' '; }
// re's \w on str patterns.
bool IsW(char32_t c) { return py::IsWordChar(c); }
bool IsDecimal(char32_t c) {
  std::string s;
  model::utf8::Append(c, &s);
  return py::IsDigitText(s);
}
// textwrap's letter: [^\d\W].
bool IsLetter(char32_t c) { return IsW(c) && !IsDecimal(c); }
// textwrap's word_punct: [\w!"'&.,?].
bool IsWordPunct(char32_t c) {
  return IsW(c) || c == '!' || c == '"' || c == '\'' || c == '&' || c == '.' || c == ',' || c == '?';
}

// (?=-{2,}\w) at `i`.
bool EmDashAhead(const Text& t, size_t i) {
  size_t j = i;
  while (j < t.size() && t[j] == '-') ++j;
  return j - i >= 2 && j < t.size() && IsW(t[j]);
}

// The end of the match of textwrap's wordsep_re starting at `p` (re.split finds one at every
// position: a run of whitespace, an em-dash, or a word up to where it may break).
size_t WordSepMatchEnd(const Text& t, size_t p) {
  const size_t n = t.size();
  if (IsWs(t[p])) {
    size_t q = p;
    while (q < n && IsWs(t[q])) ++q;
    return q;
  }
  // (?<=word_punct) -{2,} (?=\w)
  if (p > 0 && IsWordPunct(t[p - 1]) && t[p] == '-') {
    size_t q = p;
    while (q < n && t[q] == '-') ++q;
    if (q - p >= 2 && q < n && IsW(t[q])) return q;
  }
  // \S+? followed by: a hyphen between letters, the end of the word, or an em-dash.
  for (size_t q = p + 1; q <= n; ++q) {
    // `q` chars consumed (all non-whitespace); try the alternatives at q.
    if (q < n && t[q] == '-') {
      const bool behind = (q >= 2 && IsLetter(t[q - 2]) && IsLetter(t[q - 1])) ||
                          (q >= 3 && IsLetter(t[q - 3]) && t[q - 2] == '-' && IsLetter(t[q - 1]));
      const bool ahead = q + 1 < n && IsLetter(t[q + 1]) &&
                         ((q + 3 < n && t[q + 2] == '-' && IsLetter(t[q + 3])) || (q + 2 < n && IsLetter(t[q + 2])));
      if (behind && ahead) return q + 1;
    }
    if (q == n || IsWs(t[q])) return q;
    if (IsWordPunct(t[q - 1]) && EmDashAhead(t, q)) return q;
  }
  return n;  // not reached: the end of the text ends every word
}

std::vector<Text> Split(const Text& t, bool break_on_hyphens) {
  std::vector<Text> chunks;
  for (size_t p = 0; p < t.size();) {
    size_t q;
    if (break_on_hyphens) {
      q = WordSepMatchEnd(t, p);
    } else {
      q = p;
      const bool ws = IsWs(t[p]);
      while (q < t.size() && IsWs(t[q]) == ws) ++q;
    }
    chunks.push_back(t.substr(p, q - p));
    p = q;
  }
  return chunks;
}

std::string Utf8(const Text& t) {
  std::string out;
  for (char32_t c : t) model::utf8::Append(c, &out);
  return out;
}

// chunk.strip() == '' (Python's str.strip: Unicode whitespace).
bool IsBlank(const Text& chunk) { return std::all_of(chunk.begin(), chunk.end(), IsPythonSpace); }

struct Options {
  double width;
  bool width_is_int;
  bool break_long_words;
  bool break_on_hyphens;
};

// TextWrapper._wrap_chunks with no indents and no max_lines.
absl::StatusOr<std::vector<std::string>> Wrap(const Text& line, const Options& o) {
  if (o.width <= 0) {
    return TypeError(absl::StrCat("invalid width ", o.width_is_int ? absl::StrCat(static_cast<int64_t>(o.width))
                                                                   : PythonFloatRepr(o.width),
                                  " (must be > 0)"));
  }
  std::vector<Text> chunks = Split(line, o.break_on_hyphens);
  std::reverse(chunks.begin(), chunks.end());
  std::vector<std::string> lines;
  while (!chunks.empty()) {
    std::vector<Text> cur;
    double cur_len = 0;
    if (IsBlank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && cur_len + static_cast<double>(chunks.back().size()) <= o.width) {
      cur_len += static_cast<double>(chunks.back().size());
      cur.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && static_cast<double>(chunks.back().size()) > o.width) {
      // _handle_long_word.
      if (o.break_long_words) {
        // space_left = width - cur_len, or 1 for a width below 1; Python slices with it, which
        // a float (a float width of 1 or more) cannot do.
        if (o.width >= 1 && !o.width_is_int) {
          return TypeError("slice indices must be integers or None or have an __index__ method");
        }
        const size_t space_left = o.width < 1 ? 1 : static_cast<size_t>(o.width - cur_len);
        Text& chunk = chunks.back();
        size_t end = space_left;
        if (o.break_on_hyphens && chunk.size() > space_left && space_left > 0) {
          // chunk.rfind('-', 0, space_left)
          const size_t hyphen = chunk.rfind(U'-', space_left - 1);
          if (hyphen != Text::npos && hyphen > 0 &&
              std::any_of(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(hyphen),
                          [](char32_t c) { return c != '-'; })) {
            end = hyphen + 1;
          }
        }
        end = std::min(end, chunk.size());
        cur.push_back(chunk.substr(0, end));
        chunk.erase(0, end);
      } else if (cur.empty()) {
        cur.push_back(std::move(chunks.back()));
        chunks.pop_back();
      }
    }
    if (!cur.empty() && IsBlank(cur.back())) cur.pop_back();
    if (!cur.empty()) {
      Text joined;
      for (const Text& c : cur) joined += c;
      lines.push_back(Utf8(joined));
    }
  }
  return lines;
}

}  // namespace

absl::StatusOr<Value> WordWrap(const Value& s, const std::vector<Value>& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(std::vector<Value> a,
                   BindArgs("wordwrap", args, kwargs,
                            {{"width", Value(int64_t{79})}, {"break_long_words", Value(true)},
                             {"wrapstring", Value::MakeNone()}, {"break_on_hyphens", Value(true)}}));
  if (s.is_undefined()) return UndefinedError(s);
  if (!s.is_string()) return TypeError(absl::StrCat("'", s.TypeName(), "' object has no attribute 'splitlines'"));
  if (!a[0].is_number()) {
    return TypeError(absl::StrCat("'<=' not supported between instances of '", a[0].TypeName(), "' and 'int'"));
  }
  std::string wrapstring = "\n";  // transformers' environment's newline_sequence
  if (!a[2].is_none()) {
    if (!a[2].is_string()) return TypeError(absl::StrCat("wordwrap: wrapstring must be a str, not ", a[2].TypeName()));
    wrapstring = a[2].as_string();
  }
  const Options o{a[0].as_float(), !a[0].is_float(), a[1].Truthy(), a[3].Truthy()};
  std::string out;
  bool first_line = true;
  for (const std::string& line : py::SplitLines(s.as_string(), false)) {
    Text text;
    for (size_t pos = 0; pos < line.size();) text.push_back(model::utf8::DecodeAt(line, &pos));
    ASSIGN_OR_RETURN(std::vector<std::string> wrapped, Wrap(text, o));
    if (!first_line) out += wrapstring;
    first_line = false;
    for (size_t i = 0; i < wrapped.size(); ++i) {
      if (i > 0) out += wrapstring;
      out += wrapped[i];
    }
  }
  return Value(std::move(out));
}

}  // namespace mlaserve::router::chat_template
