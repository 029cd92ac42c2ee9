#include "router/chat_template/python_str.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <span>

#include "model/tokenizer/utf8.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template::py {
namespace {

struct CaseMapping {
  char32_t from;
  char32_t to[3];  // up to three code points; unused ones are 0
};
struct CodePointRange {
  char32_t first, last;
};
struct DecimalRun {
  char32_t first;
  int count;
  int first_value;
};

#include "router/chat_template/unicode_tables.inc"

bool InRanges(std::span<const CodePointRange> ranges, char32_t c) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                             [](char32_t v, const CodePointRange& r) { return v < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

const CaseMapping* FindMapping(std::span<const CaseMapping> table, char32_t c) {
  auto it = std::lower_bound(table.begin(), table.end(), c,
                             [](const CaseMapping& m, char32_t v) { return m.from < v; });
  return it != table.end() && it->from == c ? &*it : nullptr;
}

// Appends `c` mapped by `table` (unchanged when it has no entry). Returns whether it had one.
bool AppendMapped(std::span<const CaseMapping> table, char32_t c, std::u32string* out) {
  const CaseMapping* m = FindMapping(table, c);
  if (m == nullptr) {
    out->push_back(c);
    return false;
  }
  for (char32_t t : m->to) {
    if (t != 0) out->push_back(t);
  }
  return true;
}

bool IsLowerCp(char32_t c) { return InRanges(kLowercaseRanges, c); }
bool IsUpperCp(char32_t c) { return InRanges(kUppercaseRanges, c); }
bool IsTitleCp(char32_t c) { return InRanges(kTitlecaseRanges, c); }
bool IsCased(char32_t c) { return IsLowerCp(c) || IsUpperCp(c) || IsTitleCp(c); }
bool IsCaseIgnorable(char32_t c) { return InRanges(kCaseIgnorableRanges, c); }

std::u32string Decode(std::string_view s) {
  std::u32string out;
  for (size_t pos = 0; pos < s.size();) out.push_back(model::utf8::DecodeAt(s, &pos));
  return out;
}

std::string Encode(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) model::utf8::Append(c, &out);
  return out;
}

// CPython's handle_capital_sigma: a capital sigma lowers to a final sigma after a cased
// letter and not before one, skipping case-ignorable code points both ways.
char32_t LowerSigma(const std::u32string& s, size_t i) {
  size_t j = i;
  while (j > 0 && IsCaseIgnorable(s[j - 1])) --j;
  bool final_sigma = j > 0 && IsCased(s[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < s.size() && IsCaseIgnorable(s[k])) ++k;
    final_sigma = k == s.size() || !IsCased(s[k]);
  }
  return final_sigma ? 0x3C2 : 0x3C3;
}

void AppendLower(const std::u32string& s, size_t i, std::u32string* out) {
  if (s[i] == 0x3A3) {
    out->push_back(LowerSigma(s, i));
  } else {
    AppendMapped(kLowerMappings, s[i], out);
  }
}

// The title mapping; the table holds only where it differs from the upper one.
void AppendTitle(char32_t c, std::u32string* out) {
  if (FindMapping(kTitleMappings, c) != nullptr) {
    AppendMapped(kTitleMappings, c, out);
  } else {
    AppendMapped(kUpperMappings, c, out);
  }
}

std::optional<int> DecimalValue(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c < 0x80) return std::nullopt;
  auto it = std::upper_bound(std::begin(kDecimalRuns), std::end(kDecimalRuns), c,
                             [](char32_t v, const DecimalRun& r) { return v < r.first; });
  if (it == std::begin(kDecimalRuns)) return std::nullopt;
  const DecimalRun& r = *std::prev(it);
  if (c >= r.first + static_cast<char32_t>(r.count)) return std::nullopt;
  return r.first_value + static_cast<int>(c - r.first);
}

// CPython's _PyUnicode_TransformDecimalAndSpaceToASCII, then the surrounding whitespace
// removed: what int() and float() parse. Other non-ASCII code points become '?', which
// no number accepts.
std::string NumberText(std::string_view s) {
  std::string out;
  for (char32_t c : Decode(s)) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (IsPythonSpace(c)) {
      out.push_back(' ');
    } else if (std::optional<int> d = DecimalValue(c)) {
      out.push_back(static_cast<char>('0' + *d));
    } else {
      out.push_back('?');
    }
  }
  const auto space = [](char c) { return IsPythonSpace(static_cast<unsigned char>(c)); };
  size_t b = 0, e = out.size();
  while (b < e && space(out[b])) ++b;
  while (e > b && space(out[e - 1])) --e;
  return out.substr(b, e - b);
}

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

// Python slice bounds (ADJUST_INDICES) over `n` code points.
std::pair<int64_t, int64_t> Bounds(std::optional<int64_t> start, std::optional<int64_t> end, int64_t n) {
  int64_t b = start.value_or(0), e = end.value_or(n);
  if (e > n) e = n;
  if (e < 0) e = std::max<int64_t>(0, e + n);
  if (b < 0) b = std::max<int64_t>(0, b + n);
  return {b, e};
}

}  // namespace

std::string Lower(std::string_view s) {
  const std::u32string in = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) AppendLower(in, i, &out);
  return Encode(out);
}

std::string Upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : Decode(s)) AppendMapped(kUpperMappings, c, &out);
  return Encode(out);
}

std::string Title(std::string_view s) {
  const std::u32string in = Decode(s);
  std::u32string out;
  bool previous_cased = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (previous_cased) {
      AppendLower(in, i, &out);
    } else {
      AppendTitle(in[i], &out);
    }
    previous_cased = IsCased(in[i]);
  }
  return Encode(out);
}

std::string Capitalize(std::string_view s) {
  const std::u32string in = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == 0) {
      AppendTitle(in[i], &out);
    } else {
      AppendLower(in, i, &out);
    }
  }
  return Encode(out);
}

std::string SwapCase(std::string_view s) {
  const std::u32string in = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (IsUpperCp(in[i])) {
      AppendLower(in, i, &out);
    } else if (IsLowerCp(in[i])) {
      AppendMapped(kUpperMappings, in[i], &out);
    } else {
      out.push_back(in[i]);
    }
  }
  return Encode(out);
}

bool IsLower(std::string_view s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (IsUpperCp(c) || IsTitleCp(c)) return false;
    cased = cased || IsLowerCp(c);
  }
  return cased;
}

bool IsUpper(std::string_view s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (IsLowerCp(c) || IsTitleCp(c)) return false;
    cased = cased || IsUpperCp(c);
  }
  return cased;
}

bool IsWordChar(char32_t c) { return c == '_' || InRanges(kAlnumRanges, c); }

bool IsAlnum(std::string_view s) {
  const std::u32string in = Decode(s);
  return !in.empty() && std::all_of(in.begin(), in.end(), [](char32_t c) { return InRanges(kAlnumRanges, c); });
}

bool IsDigitText(std::string_view s) {
  const std::u32string in = Decode(s);
  return !in.empty() && std::all_of(in.begin(), in.end(), [](char32_t c) { return DecimalValue(c).has_value(); });
}

bool IsSpace(std::string_view s) {
  const std::u32string in = Decode(s);
  return !in.empty() && std::all_of(in.begin(), in.end(), [](char32_t c) { return IsPythonSpace(c); });
}

std::optional<int64_t> ParseInt(std::string_view text, int base) {
  const std::string s = NumberText(text);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const auto prefix = [&](char p) {
    return i + 1 < s.size() && s[i] == '0' && (s[i + 1] == p || s[i + 1] == p - 32);
  };
  bool prefixed = false;
  if ((base == 0 || base == 16) && prefix('x')) {
    base = 16, prefixed = true;
  } else if ((base == 0 || base == 8) && prefix('o')) {
    base = 8, prefixed = true;
  } else if ((base == 0 || base == 2) && prefix('b')) {
    base = 2, prefixed = true;
  }
  bool zeros_only_base0 = false;
  if (base == 0) {
    base = 10;
    zeros_only_base0 = i < s.size() && s[i] == '0';  // "010" is refused with base 0
  }
  if (prefixed) {
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;  // "0x_1f"
  }
  if (i == s.size()) return std::nullopt;
  unsigned __int128 v = 0;
  bool last_digit = false;
  for (; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (!last_digit) return std::nullopt;
      last_digit = false;
      continue;
    }
    const int d = DigitValue(s[i]);
    if (d >= base) return std::nullopt;
    if (zeros_only_base0 && d != 0) return std::nullopt;
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (v > (static_cast<unsigned __int128>(1) << 64)) v = static_cast<unsigned __int128>(1) << 64;  // saturate
    last_digit = true;
  }
  if (!last_digit) return std::nullopt;
  const unsigned __int128 limit = negative ? (static_cast<unsigned __int128>(1) << 63)
                                           : (static_cast<unsigned __int128>(1) << 63) - 1;
  if (v > limit) return std::nullopt;  // Python's int is unbounded; callers refuse this case
  return negative ? static_cast<int64_t>(-static_cast<__int128>(v)) : static_cast<int64_t>(v);
}

std::optional<double> ParseFloat(std::string_view text) {
  const std::string s = NumberText(text);
  std::string lowered;
  for (char c : s) lowered.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  std::string_view body = lowered;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return negative ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return negative ? -std::nan("") : std::nan("");
  // digits ['.' digits] | '.' digits, then [e [sign] digits]; '_' only between digits.
  std::string clean;
  size_t i = 0;
  const auto digits = [&](bool* any) {
    bool last_digit = false;
    while (i < body.size()) {
      if (body[i] >= '0' && body[i] <= '9') {
        clean.push_back(body[i++]);
        last_digit = *any = true;
      } else if (body[i] == '_' && last_digit && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '9') {
        ++i;
        last_digit = false;
      } else {
        break;
      }
    }
  };
  bool int_digits = false, frac_digits = false, exp_digits = false;
  digits(&int_digits);
  if (i < body.size() && body[i] == '.') {
    clean.push_back(body[i++]);
    digits(&frac_digits);
  }
  if (!int_digits && !frac_digits) return std::nullopt;
  if (i < body.size() && body[i] == 'e') {
    clean.push_back(body[i++]);
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) clean.push_back(body[i++]);
    digits(&exp_digits);
    if (!exp_digits) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  const double v = std::strtod(clean.c_str(), nullptr);  // overflow gives HUGE_VAL, as Python's inf
  return negative ? -v : v;
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep) {
    const std::u32string in = Decode(s);
    size_t i = 0;
    while (i < in.size()) {
      while (i < in.size() && IsPythonSpace(in[i])) ++i;
      if (i == in.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Encode(std::u32string_view(in).substr(i)));  // keeps trailing space
        break;
      }
      const size_t start = i;
      while (i < in.size() && !IsPythonSpace(in[i])) ++i;
      parts.push_back(Encode(std::u32string_view(in).substr(start, i - start)));
    }
    return parts;
  }
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t at = s.find(*sep, start);
    if (at == std::string_view::npos) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep) {
    const std::u32string in = Decode(s);
    size_t i = in.size();
    while (i > 0) {
      while (i > 0 && IsPythonSpace(in[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Encode(std::u32string_view(in).substr(0, i)));
        break;
      }
      const size_t end = i;
      while (i > 0 && !IsPythonSpace(in[i - 1])) --i;
      parts.push_back(Encode(std::u32string_view(in).substr(i, end - i)));
    }
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  if (!chars) return std::string(StripPythonSpace(s, left, right));
  const std::u32string in = Decode(s);
  const std::u32string set = Decode(*chars);
  const auto strip = [&](char32_t c) { return set.find(c) != std::u32string::npos; };
  size_t b = 0, e = in.size();
  if (left) while (b < e && strip(in[b])) ++b;
  if (right) while (e > b && strip(in[e - 1])) --e;
  return Encode(std::u32string_view(in).substr(b, e - b));
}

std::string Replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end.
    std::vector<std::string_view> cps = CodePoints(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < cps.size()) out.append(cps[i]);
    }
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out += with;
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

int64_t Find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
             std::optional<int64_t> end, bool reverse) {
  const std::vector<std::string_view> cps = CodePoints(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  auto [b, e] = Bounds(start, end, n);
  const int64_t sub_len = static_cast<int64_t>(CodePoints(sub).size());
  if (b > n || e - b < sub_len) return -1;
  const auto offset = [&](int64_t k) {
    return k == n ? s.size() : static_cast<size_t>(cps[static_cast<size_t>(k)].data() - s.data());
  };
  const std::string_view window = s.substr(offset(b), offset(e) - offset(b));
  const size_t at = reverse ? window.rfind(sub) : window.find(sub);
  if (at == std::string_view::npos) return -1;
  return b + static_cast<int64_t>(CodePoints(window.substr(0, at)).size());
}

int64_t Count(std::string_view s, std::string_view sub, std::optional<int64_t> start,
              std::optional<int64_t> end) {
  const std::vector<std::string_view> cps = CodePoints(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  auto [b, e] = Bounds(start, end, n);
  if (b > n || e < b) return 0;
  if (sub.empty()) return e - b + 1;
  const auto offset = [&](int64_t k) {
    return k == n ? s.size() : static_cast<size_t>(cps[static_cast<size_t>(k)].data() - s.data());
  };
  const std::string_view window = s.substr(offset(b), offset(e) - offset(b));
  int64_t found = 0;
  for (size_t at = window.find(sub); at != std::string_view::npos; at = window.find(sub, at + sub.size())) ++found;
  return found;
}

std::string Pad(std::string_view s, int64_t width, std::string_view fill, int align) {
  const int64_t n = static_cast<int64_t>(CodePoints(s).size());
  if (width <= n) return std::string(s);
  const int64_t margin = width - n;
  // CPython's center: the odd column goes left when the width is odd.
  const int64_t left = align < 0 ? 0 : align > 0 ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < margin - left; ++i) out += fill;
  return out;
}

std::string ZFill(std::string_view s, int64_t width) {
  const int64_t n = static_cast<int64_t>(CodePoints(s).size());
  if (width <= n) return std::string(s);
  const std::string zeros(static_cast<size_t>(width - n), '0');
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) return std::string(1, s[0]) + zeros + std::string(s.substr(1));
  return zeros + std::string(s);
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  const std::u32string in = Decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char32_t c = in[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                          c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < in.size() && in[i + 1] == '\n') end = i + 2;
    lines.push_back(Encode(std::u32string_view(in).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < in.size()) lines.push_back(Encode(std::u32string_view(in).substr(start)));
  return lines;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace mlaserve::router::chat_template::py
