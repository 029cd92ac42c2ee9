// ApplyFilter: Jinja2 3.1's builtin filters (filters.py) as transformers' environment has
// them, with its own tojson: the text and number filters here, those over sequences and
// mappings in sequence_filters.cc, striptags and urlencode in html_filters.cc, wordwrap in
// wordwrap.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "model/tokenizer/utf8.h"
#include "router/chat_template/builtins.h"
#include "router/chat_template/html_filters.h"
#include "router/chat_template/percent_format.h"
#include "router/chat_template/python_str.h"
#include "router/chat_template/sequence_filters.h"
#include "router/chat_template/wordwrap.h"

namespace mlaserve::router::chat_template {
namespace {

using namespace sequence_filters;  // NOLINT: the registry below names them all
using Args = std::vector<Value>;
using FilterFn = std::function<absl::StatusOr<Value>(const Value&, const Args&, const KwArgs&)>;

Value Str(std::string s) { return Value(std::move(s)); }
Value Int(int64_t i) { return Value(i); }

// Text of a str-only filter's result: Markup stays Markup where markupsafe's method keeps it.
Value SameKind(const Value& input, std::string text) {
  return input.is_markup() ? Value::MakeMarkup(std::move(text)) : Value(std::move(text));
}

// Python's len().
absl::StatusOr<int64_t> Len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(CodePoints(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().entries.size());
  if (v.is_loop()) return static_cast<int64_t>(v.as_loop().items.size());
  return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

absl::StatusOr<Value> ToInt(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("int", args, kwargs, {{"default", Int(0)}, {"base", Int(10)}}));
  if (value.is_undefined()) return UndefinedError(value);
  const auto from_double = [&](double d) -> absl::StatusOr<Value> {
    if (std::isnan(d)) return a[0];
    if (std::fabs(d) >= 9.2e18) return TypeError("int: the value does not fit 64 bits (Python's ints are unbounded)");
    return Int(static_cast<int64_t>(d));
  };
  if (value.is_string()) {
    if (!a[1].is_int() && !a[1].is_bool()) return a[0];
    const int64_t base = a[1].as_int();
    if (base == 0 || (base >= 2 && base <= 36)) {
      if (std::optional<int64_t> v = py::ParseInt(value.as_string(), static_cast<int>(base))) return Int(*v);
    }
    std::optional<double> d = py::ParseFloat(value.as_string());
    if (!d || std::isinf(*d)) return a[0];
    return from_double(*d);
  }
  if (value.is_bool() || value.is_int()) return Int(value.as_int());
  if (value.is_float()) {
    if (std::isinf(value.as_float())) return TypeError("cannot convert float infinity to integer");
    return from_double(value.as_float());
  }
  return a[0];
}

absl::StatusOr<Value> ToFloat(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("float", args, kwargs, {{"default", Value(0.0)}}));
  if (value.is_undefined()) return UndefinedError(value);
  if (value.is_string()) {
    std::optional<double> d = py::ParseFloat(value.as_string());
    return d ? Value(*d) : a[0];
  }
  if (value.is_number()) return Value(value.as_float());
  return a[0];
}

// Python's round(x, n) for a float: correctly rounded, ties to even (CPython's dtoa mode 3).
double RoundFloat(double x, int64_t n) {
  if (!std::isfinite(x) || x == 0) return x;
  if (n > 323) return x;
  if (n < -308) return 0.0 * x;
  char buf[512];
  if (n >= 0) {
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(n), x);
    return std::strtod(buf, nullptr);
  }
  // Rounding to 10^-n: the exact integer part decides, the fraction only breaks ties.
  const double whole = std::trunc(x);
  const bool fraction = whole != x;
  std::snprintf(buf, sizeof(buf), "%.0f", std::fabs(whole));
  std::string digits = buf;
  const size_t k = static_cast<size_t>(-n);
  if (digits.size() < k) {
    // |x| < 10^k / 10 ... below half of 10^k unless it has k digits.
    return 0.0 * x;
  }
  const std::string head = digits.substr(0, digits.size() - k);
  const std::string tail = digits.substr(digits.size() - k);
  const std::string half = "5" + std::string(k - 1, '0');
  bool up = tail > half || (tail == half && fraction);
  if (tail == half && !fraction) up = !head.empty() && (head.back() - '0') % 2 == 1;
  double h = head.empty() ? 0.0 : std::strtod(head.c_str(), nullptr);
  if (up) h += 1;
  const double r = std::strtod(absl::StrCat(static_cast<int64_t>(h), std::string(k, '0')).c_str(), nullptr);
  return x < 0 ? -r : r;
}

absl::StatusOr<Value> Round(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("round", args, kwargs, {{"precision", Int(0)}, {"method", Str("common")}}));
  if (!a[1].is_string() || (a[1].as_string() != "common" && a[1].as_string() != "ceil" && a[1].as_string() != "floor")) {
    return TypeError("method must be common, ceil or floor");
  }
  if (value.is_undefined()) return UndefinedError(value);
  ASSIGN_OR_RETURN(int64_t precision, IntArg("round", a[0]));
  if (!value.is_number()) return TypeError(absl::StrCat("type ", value.TypeName(), " doesn't define __round__ method"));
  if (a[1].as_string() == "common") {
    if (value.is_float()) return Value(RoundFloat(value.as_float(), precision));
    int64_t i = value.as_int();
    if (precision >= 0) return Int(i);
    if (precision < -18) return Int(0);
    int64_t p = 1;
    for (int64_t k = 0; k < -precision; ++k) p *= 10;
    int64_t q = i / p, r = i % p;
    if (r < 0) r += p, q -= 1;
    if (2 * r > p || (2 * r == p && q % 2 != 0)) ++q;
    return Int(q * p);
  }
  // math.ceil / math.floor(value * 10**precision) / 10**precision.
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = value.as_float() * scale;
  if (std::isnan(scaled)) return TypeError("cannot convert float NaN to integer");
  if (std::isinf(scaled)) return TypeError("cannot convert float infinity to integer");
  const double r = a[1].as_string() == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value(r / scale);
}

absl::StatusOr<Value> Abs(const Value& value) {
  if (value.is_bool() || value.is_int()) return Int(value.as_int() < 0 ? -value.as_int() : value.as_int());
  if (value.is_float()) return Value(std::fabs(value.as_float()));
  return TypeError(absl::StrCat("bad operand type for abs(): '", value.TypeName(), "'"));
}

// Jinja's do_title: each run of characters between [-\s({\[<] separators gets its first
// code point upper-cased and the rest lower-cased.
std::string JinjaTitle(std::string_view s) {
  const auto separator = [](std::string_view cp) {
    return cp == "-" || cp == "(" || cp == "{" || cp == "[" || cp == "<" || StripPythonSpace(cp, true, false).empty();
  };
  std::vector<std::string_view> cps = CodePoints(s);
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    const bool sep = separator(cps[i]);
    size_t j = i;
    std::string run;
    while (j < cps.size() && separator(cps[j]) == sep) run.append(cps[j++]);
    if (sep) {
      out += run;
    } else {
      out += py::Upper(cps[i]);
      out += py::Lower(std::string_view(run).substr(cps[i].size()));
    }
    i = j;
  }
  return out;
}

absl::StatusOr<Value> Indent(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("indent", args, kwargs, {{"width", Int(4)}, {"first", Value(false)}, {"blank", Value(false)}}));
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].as_string();
  } else {
    ASSIGN_OR_RETURN(int64_t width, IntArg("indent", a[0]));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
  }
  if (value.is_undefined()) return UndefinedError(value);
  if (!value.is_string()) return TypeError(absl::StrCat("unsupported operand type(s) for +=: '", value.TypeName(), "' and 'str'"));
  const std::vector<std::string> lines = py::SplitLines(value.as_string() + "\n", false);
  std::string rv;
  if (a[2].Truthy()) {
    rv = absl::StrJoin(lines, "\n" + indention);
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (a[1].Truthy()) rv = indention + rv;
  return SameKind(value, std::move(rv));
}

absl::StatusOr<Value> Truncate(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("truncate", args, kwargs,
                                    {{"length", Int(255)}, {"killwords", Value(false)}, {"end", Str("...")}, {"leeway", Value::MakeNone()}}));
  ASSIGN_OR_RETURN(int64_t length, IntArg("truncate", a[0]));
  const int64_t leeway = a[3].is_none() ? 5 : a[3].as_int();
  if (!a[2].is_string()) return TypeError("truncate: end must be a string");
  const int64_t end_len = static_cast<int64_t>(CodePoints(a[2].as_string()).size());
  if (length < end_len) return TypeError(absl::StrCat("expected length >= ", end_len, ", got ", length));
  if (leeway < 0) return TypeError(absl::StrCat("expected leeway >= 0, got ", leeway));
  ASSIGN_OR_RETURN(int64_t n, Len(value));
  if (n <= length + leeway) return value;
  if (!value.is_string()) return TypeError(absl::StrCat("truncate of a ", value.TypeName(), " is not supported"));
  if (value.is_markup()) return TypeError("truncate of a Markup string is not supported");
  std::vector<std::string_view> cps = CodePoints(value.as_string());
  std::string head;
  for (int64_t i = 0; i < length - end_len; ++i) head.append(cps[static_cast<size_t>(i)]);
  if (!a[1].Truthy()) head = py::RSplit(head, std::string(" "), 1)[0];
  return Str(head + a[2].as_string());
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
absl::StatusOr<Value> ToJsonFilter(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("tojson", args, kwargs,
                                    {{"ensure_ascii", Value(false)}, {"indent", Value::MakeNone()},
                                     {"separators", Value::MakeNone()}, {"sort_keys", Value(false)}}));
  JsonOptions o;
  o.ensure_ascii = a[0].Truthy();
  o.sort_keys = a[3].Truthy();
  if (a[1].is_string()) {
    o.indent = a[1].as_string();
  } else if (a[1].is_int() || a[1].is_bool()) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, a[1].as_int())), ' ');
  } else if (!a[1].is_none()) {
    return TypeError(absl::StrCat("tojson: indent must be an int or a str, not ", a[1].TypeName()));
  }
  if (o.indent) o.item_separator = ",";
  if (!a[2].is_none()) {
    ASSIGN_OR_RETURN(std::vector<Value> seps, Iterate(a[2]));
    if (seps.size() != 2) return TypeError(absl::StrCat("tojson: separators must be two strings, got ", seps.size()));
    if (!seps[0].is_string() || !seps[1].is_string()) return TypeError("tojson: separators must be strings");
    o.item_separator = seps[0].as_string();
    o.key_separator = seps[1].as_string();
  }
  ASSIGN_OR_RETURN(std::string json, ToJson(value, o));
  return Str(std::move(json));
}

const std::map<std::string_view, FilterFn>& Filters() {
  static const auto* filters = new std::map<std::string_view, FilterFn>{
      {"abs", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("abs", a, k, {}).status());
         return Abs(v);
       }},
      {"attr", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args b, BindArgs("attr", a, k, {{"name"}}));
         return AttributeOnly(v, b[0]);
       }},
      {"batch", Batch},
      {"capitalize", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("capitalize", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return SameKind(v, py::Capitalize(s));
       }},
      {"center", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args b, BindArgs("center", a, k, {{"width", Int(80)}}));
         ASSIGN_OR_RETURN(int64_t width, IntArg("center", b[0]));
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return Str(py::Pad(s, width, " ", 0));
       }},
      {"count", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("count", a, k, {}).status());
         ASSIGN_OR_RETURN(int64_t n, Len(v));
         return Int(n);
       }},
      {"default", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args b, BindArgs("default", a, k, {{"default_value", Str("")}, {"boolean", Value(false)}}));
         if (v.is_undefined() || (b[1].Truthy() && !v.Truthy())) return b[0];
         return v;
       }},
      {"dictsort", DictSort},
      {"escape", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("escape", a, k, {}).status());
         if (v.is_markup()) return v;
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return Value::MakeMarkup(py::HtmlEscape(s));
       }},
      {"first", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("first", a, k, {}).status());
         return First(v);
       }},
      {"float", ToFloat},
      {"forceescape", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("forceescape", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return Value::MakeMarkup(py::HtmlEscape(s));
       }},
      {"groupby", GroupBy},
      {"format", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         if (!a.empty() && !k.empty()) return TypeError("can't handle positional and keyword arguments at the same time");
         if (v.is_markup()) return TypeError("format of a Markup string is not supported");
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         Value values = Value::MakeTuple(a);
         if (!k.empty()) {
           Dict d;
           for (const auto& [key, val] : k) d.entries.emplace_back(key, val);
           values = Value(std::move(d));
         }
         ASSIGN_OR_RETURN(std::string out, PercentFormat(s, values));
         return Str(std::move(out));
       }},
      {"indent", Indent},
      {"int", ToInt},
      {"items", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("items", a, k, {}).status());
         return Items(v);
       }},
      {"join", Join},
      {"last", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("last", a, k, {}).status());
         return Last(v);
       }},
      {"length", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("length", a, k, {}).status());
         ASSIGN_OR_RETURN(int64_t n, Len(v));
         return Int(n);
       }},
      {"list", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("list", a, k, {}).status());
         ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
         return Value(std::move(items));
       }},
      {"lower", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("lower", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return SameKind(v, py::Lower(s));
       }},
      {"map", Map},
      {"max", [](const Value& v, const Args& a, const KwArgs& k) { return MinMax(v, a, k, true); }},
      {"min", [](const Value& v, const Args& a, const KwArgs& k) { return MinMax(v, a, k, false); }},
      {"reject", [](const Value& v, const Args& a, const KwArgs& k) { return SelectOrReject(v, a, k, false, false); }},
      {"rejectattr", [](const Value& v, const Args& a, const KwArgs& k) { return SelectOrReject(v, a, k, false, true); }},
      {"replace", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args b, BindArgs("replace", a, k, {{"old"}, {"new"}, {"count", Value::MakeNone()}}));
         int64_t count = -1;
         if (!b[2].is_none()) {
           ASSIGN_OR_RETURN(count, IntArg("replace", b[2]));
         }
         ASSIGN_OR_RETURN(std::string s, PythonStr(v));
         ASSIGN_OR_RETURN(std::string old_text, PythonStr(b[0]));
         ASSIGN_OR_RETURN(std::string new_text, PythonStr(b[1]));
         return Str(py::Replace(s, old_text, new_text, count));
       }},
      {"reverse", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("reverse", a, k, {}).status());
         return Reverse(v);
       }},
      {"round", Round},
      {"safe", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("safe", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return Value::MakeMarkup(std::move(s));
       }},
      {"select", [](const Value& v, const Args& a, const KwArgs& k) { return SelectOrReject(v, a, k, true, false); }},
      {"selectattr", [](const Value& v, const Args& a, const KwArgs& k) { return SelectOrReject(v, a, k, true, true); }},
      {"slice", SliceFilter},
      {"sort", Sort},
      {"string", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("string", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return SameKind(v, std::move(s));
       }},
      {"striptags", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("striptags", a, k, {}).status());
         return html_filters::StripTags(v);
       }},
      {"sum", Sum},
      {"title", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("title", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return Str(JinjaTitle(s));
       }},
      {"tojson", ToJsonFilter},
      {"trim", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args b, BindArgs("trim", a, k, {{"chars", Value::MakeNone()}}));
         ASSIGN_OR_RETURN(std::optional<std::string> chars, OptionalStrArg("trim", b[0]));
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return SameKind(v, py::Strip(s, chars, true, true));
       }},
      {"truncate", Truncate},
      {"unique", Unique},
      {"urlencode", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("urlencode", a, k, {}).status());
         return html_filters::UrlEncode(v);
       }},
      {"upper", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("upper", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         return SameKind(v, py::Upper(s));
       }},
      {"wordwrap", WordWrap},
      {"wordcount", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("wordcount", a, k, {}).status());
         ASSIGN_OR_RETURN(std::string s, SoftStr(v));
         int64_t words = 0;
         bool in_word = false;
         for (std::string_view cp : CodePoints(s)) {
           size_t pos = 0;
           const bool w = py::IsWordChar(model::utf8::DecodeAt(cp, &pos));
           if (w && !in_word) ++words;
           in_word = w;
         }
         return Int(words);
       }},
  };
  return *filters;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return name == "d" || name == "e" || Filters().count(name) > 0;
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value, const std::vector<Value>& args,
                                  const KwArgs& kwargs) {
  const std::string_view canonical = name == "d" ? "default" : name == "e" ? "escape" : std::string_view(name);
  auto it = Filters().find(canonical);
  if (it == Filters().end()) return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", name, "'"));
  absl::StatusOr<Value> r = it->second(value, args, kwargs);
  if (!r.ok() && !absl::StrContains(r.status().message(), name)) {
    return absl::Status(r.status().code(), absl::StrCat("filter '", name, "': ", r.status().message()));
  }
  return r;
}

}  // namespace mlaserve::router::chat_template
