#include "router/chat_template/percent_format.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/utf8.h"
#include "router/chat_template/call_args.h"

namespace mlaserve::router::chat_template {
namespace {

struct Spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  std::optional<int64_t> width, precision;
  char conversion = 's';
};

std::string PadText(std::string text, const Spec& spec) {
  const int64_t n = static_cast<int64_t>(CodePoints(text).size());
  if (!spec.width || *spec.width <= n) return text;
  const std::string pad(static_cast<size_t>(*spec.width - n), ' ');
  return spec.left ? text + pad : pad + text;
}

// printf of one number with the spec's flags (C's and Python's agree for these).
std::string CFormat(const Spec& spec, char conversion, bool is_float, int64_t i, double d) {
  std::string f = "%";
  if (spec.left) f += '-';
  if (spec.plus) f += '+';
  if (spec.space) f += ' ';
  if (spec.alt) f += '#';
  if (spec.zero && !spec.left) f += '0';
  if (spec.width) absl::StrAppend(&f, *spec.width);
  if (spec.precision) absl::StrAppend(&f, ".", *spec.precision);
  if (!is_float) f += "ll";
  f += conversion;
  char buf[512];
  const int n = is_float ? std::snprintf(buf, sizeof(buf), f.c_str(), d)
                         : std::snprintf(buf, sizeof(buf), f.c_str(), static_cast<long long>(i));
  return std::string(buf, static_cast<size_t>(std::max(0, std::min<int>(n, sizeof(buf) - 1))));
}

absl::StatusOr<std::string> Convert(const Spec& spec, const Value& v) {
  const char c = spec.conversion;
  // str() and repr() of Jinja's Undefined are '' and 'Undefined'; its other conversions fail.
  if (v.is_undefined() && c != 's' && c != 'r' && c != 'a') return UndefinedError(v);
  switch (c) {
    case 's': {
      ASSIGN_OR_RETURN(std::string text, PythonStr(v));
      if (spec.precision) {
        std::vector<std::string_view> cps = CodePoints(text);
        if (static_cast<int64_t>(cps.size()) > *spec.precision) {
          std::string cut;
          for (int64_t k = 0; k < *spec.precision; ++k) cut.append(cps[static_cast<size_t>(k)]);
          text = cut;
        }
      }
      return PadText(std::move(text), spec);
    }
    case 'r':
    case 'a': {
      ASSIGN_OR_RETURN(std::string text, c == 'a' ? PythonAscii(v) : PythonRepr(v));
      return PadText(std::move(text), spec);
    }
    case 'c': {
      std::string text;
      if (v.is_string() && CodePoints(v.as_string()).size() == 1) {
        text = v.as_string();
      } else if (v.is_int() || v.is_bool()) {
        const int64_t cp = v.as_int();
        if (cp < 0 || cp > 0x10FFFF) return TypeError("%c arg not in range(0x110000)");
        model::utf8::Append(static_cast<char32_t>(cp), &text);
      } else {
        return TypeError(absl::StrCat("%c requires an int or a unicode character, not ", v.TypeName()));
      }
      return PadText(std::move(text), spec);
    }
    case 'd': case 'i': case 'u':
      if (v.is_float()) {
        const double d = v.as_float();
        if (std::isnan(d) || std::isinf(d)) return TypeError("cannot convert float NaN or infinity to integer");
        if (std::fabs(d) >= 9.2e18) return TypeError("%d of a float beyond 64 bits is not supported");
        return CFormat(spec, 'd', false, static_cast<int64_t>(d), 0);
      }
      if (!v.is_int() && !v.is_bool()) {
        return TypeError(absl::StrCat("%", std::string(1, c), " format: a real number is required, not ", v.TypeName()));
      }
      return CFormat(spec, 'd', false, v.as_int(), 0);
    case 'o': case 'x': case 'X': {
      if (!v.is_int() && !v.is_bool()) {
        return TypeError(absl::StrCat("%", std::string(1, c), " format: an integer is required, not ", v.TypeName()));
      }
      // Python's layout (not C's): sign, then "0o" / "0x" / "0X" with '#' (also for 0), then
      // the magnitude's digits.
      const int64_t i = v.as_int();
      uint64_t magnitude = i < 0 ? uint64_t{0} - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
      const int base = c == 'o' ? 8 : 16;
      const char* digit_chars = c == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
      std::string digits;
      do {
        digits.insert(digits.begin(), digit_chars[magnitude % static_cast<uint64_t>(base)]);
        magnitude /= static_cast<uint64_t>(base);
      } while (magnitude > 0);
      if (spec.precision && static_cast<int64_t>(digits.size()) < *spec.precision) {
        digits.insert(0, static_cast<size_t>(*spec.precision) - digits.size(), '0');
      }
      const std::string sign = i < 0 ? "-" : spec.plus ? "+" : spec.space ? " " : "";
      const std::string prefix = spec.alt ? std::string("0") + (c == 'o' ? 'o' : c) : "";
      const int64_t len = static_cast<int64_t>(sign.size() + prefix.size() + digits.size());
      if (spec.width && *spec.width > len) {
        const size_t pad = static_cast<size_t>(*spec.width - len);
        if (spec.left) return sign + prefix + digits + std::string(pad, ' ');
        if (spec.zero) return sign + prefix + std::string(pad, '0') + digits;
        return std::string(pad, ' ') + sign + prefix + digits;
      }
      return sign + prefix + digits;
    }
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
      if (!v.is_number()) return TypeError(absl::StrCat("must be real number, not ", v.TypeName()));
      {
        Spec s = spec;
        if (!s.precision) s.precision = 6;
        return CFormat(s, c, true, 0, v.as_float());
      }
    default:
      return TypeError(absl::StrCat("unsupported format character '", std::string(1, c), "'"));
  }
}

}  // namespace

absl::StatusOr<std::string> PercentFormat(std::string_view format, const Value& args) {
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  // Python takes any non-tuple, non-str operand with __getitem__ as the mapping
  // (PyMapping_Check): then a spare argument is no error, and `%(key)` subscripts it (a list
  // by a str key fails; Jinja's Undefined raises its UndefinedError).
  bool subscriptable = false;
  if (args.is_tuple()) {
    positional = args.as_list();
  } else {
    if (args.is_dict()) mapping = &args.as_dict();
    subscriptable = args.is_dict() || args.is_undefined() || (args.is_list() && args.is_indexable());
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  const auto take = [&]() -> absl::StatusOr<Value> {
    if (next >= positional.size()) return TypeError("not enough arguments for format string");
    return positional[next++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i == format.size()) return TypeError("incomplete format");
    std::optional<Value> keyed;
    if (format[i] == '(') {
      if (args.is_undefined()) return UndefinedError(args);
      if (subscriptable && mapping == nullptr) return TypeError("list indices must be integers or slices, not str");
      if (mapping == nullptr) return TypeError("format requires a mapping");
      int depth = 1;
      const size_t start = ++i;
      while (i < format.size() && depth > 0) {
        if (format[i] == '(') ++depth;
        if (format[i] == ')') --depth;
        ++i;
      }
      if (depth > 0) return TypeError("incomplete format key");
      const std::string key(format.substr(start, i - 1 - start));
      const Value* found = mapping->Find(key);
      if (found == nullptr) return TypeError(absl::StrCat("KeyError: '", key, "'"));
      keyed = *found;
      used_mapping = true;
    }
    Spec spec;
    for (; i < format.size(); ++i) {
      const char f = format[i];
      if (f == '-') spec.left = true;
      else if (f == '+') spec.plus = true;
      else if (f == ' ') spec.space = true;
      else if (f == '#') spec.alt = true;
      else if (f == '0') spec.zero = true;
      else break;
    }
    const auto number = [&](std::optional<int64_t>* out_n) -> absl::Status {
      if (i < format.size() && format[i] == '*') {
        ++i;
        ASSIGN_OR_RETURN(Value n, take());
        if (!n.is_int()) return TypeError("* wants int");
        *out_n = n.as_int();
        return absl::OkStatus();
      }
      int64_t n = 0;
      bool any = false;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        n = n * 10 + (format[i++] - '0');
        if (n > 100000) return TypeError("width too big");
        any = true;
      }
      if (any) *out_n = n;
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(number(&spec.width));
    if (spec.width && *spec.width < 0) {
      spec.left = true;
      spec.width = -*spec.width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      RETURN_IF_ERROR(number(&spec.precision));
      if (!spec.precision || *spec.precision < 0) spec.precision = 0;
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i == format.size()) return TypeError("incomplete format");
    spec.conversion = format[i];
    if (spec.conversion == '%') {
      out.push_back('%');
      continue;
    }
    Value v;
    if (keyed) {
      v = *keyed;
    } else {
      ASSIGN_OR_RETURN(v, take());
    }
    ASSIGN_OR_RETURN(std::string text, Convert(spec, v));
    out += text;
  }
  if (!used_mapping && !subscriptable && next < positional.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace mlaserve::router::chat_template
