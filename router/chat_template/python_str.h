// Python's str behaviour that chat templates reach through Jinja's filters, tests and str
// methods, on UTF-8 text (valid UTF-8: it came from JSON or the template): full Unicode case
// mappings (str.lower() with its final-sigma rule, upper(), title(), capitalize()),
// islower() / isupper(), re's \w, int() and float() parsing, split / rsplit / strip /
// replace / find / count, and markupsafe's HTML escape. Indices and counts are in code
// points, as Python's are. The Unicode data (unicode_tables.inc) is read off Python 3.11's
// own str methods by tools/make_unicode_tables.py, so it agrees with the Python transformers runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::router::chat_template::py {

std::string Lower(std::string_view s);
std::string Upper(std::string_view s);
std::string Title(std::string_view s);       // str.title()
std::string Capitalize(std::string_view s);  // str.capitalize() (3.8+: first code point titlecased)
std::string SwapCase(std::string_view s);
bool IsLower(std::string_view s);
bool IsUpper(std::string_view s);
// re's \w on str patterns: str.isalnum() or '_'.
bool IsWordChar(char32_t c);
bool IsAlnum(std::string_view s);   // str.isalnum()
bool IsDigitText(std::string_view s);  // str.isdecimal() of ASCII and Unicode decimal digits
bool IsSpace(std::string_view s);   // str.isspace()

// int(s, base) (base 0 or 2..36): Python's whitespace, sign, prefixes and '_' rules;
// nullopt where Python raises ValueError (or the value does not fit 64 bits).
std::optional<int64_t> ParseInt(std::string_view s, int base);
// float(s): nullopt where Python raises ValueError.
std::optional<double> ParseFloat(std::string_view s);

// str.split(sep, maxsplit) / str.rsplit(...): `sep` nullopt splits on runs of whitespace.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.strip(chars) and its one-sided forms; `chars` nullopt strips whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.replace(old, new, count); count < 0: all.
std::string Replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
// str.find / rfind(sub, start, end) in code points (-1: not found); str.count(sub, start, end).
// start / end as Python's slice bounds (nullopt: the ends).
int64_t Find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
             std::optional<int64_t> end, bool reverse);
int64_t Count(std::string_view s, std::string_view sub, std::optional<int64_t> start,
              std::optional<int64_t> end);
// str.center / ljust / rjust(width, fill) and zfill(width).
std::string Pad(std::string_view s, int64_t width, std::string_view fill, int align /* <0 ljust, 0 center, >0 rjust */);
std::string ZFill(std::string_view s, int64_t width);
// str.splitlines(keepends) (Python's line boundaries: \n \r \r\n \v \f \x1c-\x1e \x85 U+2028/9).
std::vector<std::string> SplitLines(std::string_view s, bool keepends);

// markupsafe's escape(): & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view s);

}  // namespace mlaserve::router::chat_template::py
