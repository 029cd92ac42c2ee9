#include "router/chat_template/html_filters.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "model/tokenizer/utf8.h"
#include "router/chat_template/builtins.h"
#include "router/chat_template/python_str.h"

namespace mlaserve::router::chat_template::html_filters {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// html._invalid_charrefs: what the HTML5 parser makes of these numbers (Windows-1252 for
// 0x80-0x9F).
std::optional<char32_t> InvalidCharref(uint64_t num) {
  static constexpr char32_t kC1[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  if (num == 0) return 0xFFFD;
  if (num == 0x0D) return 0x0D;
  if (num >= 0x80 && num <= 0x9F) return kC1[num - 0x80];
  return std::nullopt;
}

// html._invalid_codepoints: numbers that unescape to nothing.
bool InvalidCodepoint(uint64_t num) {
  return (num >= 0x1 && num <= 0x8) || num == 0xB || (num >= 0xE && num <= 0x1F) || (num >= 0x7F && num <= 0x9F) ||
         (num >= 0xFDD0 && num <= 0xFDEF) || (num <= 0x10FFFF && (num & 0xFFFE) == 0xFFFE);
}

// html._replace_charref for a numeric reference: `digits` in `base`.
std::string NumericCharref(std::string_view digits, int base) {
  uint64_t num = 0;
  for (char c : digits) {
    const uint64_t d = IsDigit(c) ? static_cast<uint64_t>(c - '0') : static_cast<uint64_t>((c | 0x20) - 'a' + 10);
    num = num * static_cast<uint64_t>(base) + d;
    if (num > 0x10FFFF) num = 0x110000;  // beyond Unicode: all alike from here on
  }
  std::string out;
  if (std::optional<char32_t> cp = InvalidCharref(num)) {
    model::utf8::Append(*cp, &out);
  } else if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
    model::utf8::Append(0xFFFD, &out);
  } else if (!InvalidCodepoint(num)) {
    model::utf8::Append(static_cast<char32_t>(num), &out);
  }
  return out;
}

// html._replace_charref for a named reference `name` (what follows '&', ';' included).
absl::StatusOr<std::string> NamedCharref(std::string_view name) {
  struct Entity {
    std::string_view name;
    std::string_view text;
  };
  // html.entities.html5's entries for these names, with and without ';' ("apos" has none).
  static constexpr Entity kKnown[] = {
      {"amp", "&"},  {"amp;", "&"},  {"AMP", "&"},  {"AMP;", "&"},    {"lt", "<"},       {"lt;", "<"},
      {"LT", "<"},   {"LT;", "<"},   {"gt", ">"},   {"gt;", ">"},     {"GT", ">"},       {"GT;", ">"},
      {"quot", "\""}, {"quot;", "\""}, {"QUOT", "\""}, {"QUOT;", "\""}, {"apos;", "'"}, {"nbsp", "\xC2\xA0"},
      {"nbsp;", "\xC2\xA0"}};
  for (const Entity& e : kKnown) {
    if (e.name == name) return std::string(e.text);
  }
  // Every HTML5 name starts with an ASCII letter and has two characters at least, so text that
  // does not start with a letter, or is one letter (and maybe ';'), is no reference or prefix.
  if (!IsAsciiLetter(name[0]) || name.size() == 1 || (name.size() == 2 && name[1] == ';')) {
    return absl::StrCat("&", std::string(name));
  }
  return TypeError(absl::StrCat("striptags: the character reference '&", std::string(name),
                                "' is not supported (HTML5's named references are not tabled here)"));
}

// Python's html.unescape: the regex &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?).
absl::StatusOr<std::string> Unescape(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) break;
    out.append(s.substr(i, amp - i));
    size_t j = amp + 1;
    if (j < s.size() && s[j] == '#') {
      const bool hex = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
      size_t k = j + (hex ? 2 : 1);
      const size_t digits_begin = k;
      while (k < s.size() && (hex ? IsHexDigit(s[k]) : IsDigit(s[k]))) ++k;
      if (k == digits_begin) {  // "&#" without digits: not a reference
        out.push_back('&');
        i = j;
        continue;
      }
      out += NumericCharref(s.substr(digits_begin, k - digits_begin), hex ? 16 : 10);
      if (k < s.size() && s[k] == ';') ++k;
      i = k;
      continue;
    }
    // A named reference: 1-32 code points other than \t \n \f space < & # ;, then maybe ';'.
    size_t k = j;
    for (int n = 0; n < 32 && k < s.size(); ++n) {
      const char c = s[k];
      if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';') break;
      size_t next = k;
      model::utf8::DecodeAt(s, &next);
      k = next;
    }
    if (k == j) {
      out.push_back('&');
      i = j;
      continue;
    }
    if (k < s.size() && s[k] == ';') ++k;
    ASSIGN_OR_RETURN(std::string text, NamedCharref(s.substr(j, k - j)));
    out += text;
    i = k;
  }
  out.append(s.substr(std::min(i, s.size())));
  return out;
}

// Jinja's url_quote(obj, for_qs): str(obj) as UTF-8, quoted; for a query string '/' is
// quoted too and "%20" becomes '+'.
absl::StatusOr<std::string> UrlQuote(const Value& v, bool for_qs) {
  ASSIGN_OR_RETURN(std::string s, PythonStr(v));
  std::string out;
  for (char c : s) {
    if (IsAsciiLetter(c) || IsDigit(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) {
      out.push_back(c);
    } else if (for_qs && c == ' ') {
      out.push_back('+');
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const unsigned char u = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xF]);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> StripTags(const Value& value) {
  ASSIGN_OR_RETURN(std::string s, PythonStr(value));
  // Comments first, then tags, each removed from its start mark to the first end mark after
  // it; an unclosed one stops the search.
  for (size_t start; (start = s.find("<!--")) != std::string::npos;) {
    const size_t end = s.find("-->", start);
    if (end == std::string::npos) break;
    s.erase(start, end + 3 - start);
  }
  for (size_t start; (start = s.find('<')) != std::string::npos;) {
    const size_t end = s.find('>', start);
    if (end == std::string::npos) break;
    s.erase(start, end + 1 - start);
  }
  ASSIGN_OR_RETURN(std::string text, Unescape(absl::StrJoin(py::Split(s, std::nullopt, -1), " ")));
  return Value(std::move(text));
}

absl::StatusOr<Value> UrlEncode(const Value& value) {
  if (value.is_string() || !(value.is_list() || value.is_dict() || value.is_iterator() || value.is_undefined() ||
                             value.is_loop())) {
    ASSIGN_OR_RETURN(std::string quoted, UrlQuote(value, false));
    return Value(std::move(quoted));
  }
  std::vector<std::pair<Value, Value>> pairs;
  if (value.is_dict()) {
    for (const auto& [k, v] : value.as_dict().entries) pairs.emplace_back(Value(k), v);
  } else {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    for (const Value& item : items) {
      // `for k, v in items`: each item unpacks into two.
      ASSIGN_OR_RETURN(std::vector<Value> kv, Iterate(item));
      if (kv.size() < 2) return TypeError(absl::StrCat("not enough values to unpack (expected 2, got ", kv.size(), ")"));
      if (kv.size() > 2) return TypeError("too many values to unpack (expected 2)");
      pairs.emplace_back(kv[0], kv[1]);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [k, v] : pairs) {
    ASSIGN_OR_RETURN(std::string key, UrlQuote(k, true));
    ASSIGN_OR_RETURN(std::string val, UrlQuote(v, true));
    parts.push_back(absl::StrCat(key, "=", val));
  }
  return Value(absl::StrJoin(parts, "&"));
}

}  // namespace mlaserve::router::chat_template::html_filters
