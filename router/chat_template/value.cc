#include "router/chat_template/value.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "common/status.h"

namespace mlaserve::router::chat_template {
namespace {

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

void AppendJsonString(std::string_view s, std::string* out) {
  // json.dumps(ensure_ascii=False): only '"', '\\' and control characters are escaped.
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& v, int indent, int level, std::string* out) {
  const auto newline = [&](int lvl) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * lvl), ' ');
  };
  if (v.is_none()) {
    out->append("null");
  } else if (v.is_bool()) {
    out->append(v.as_bool() ? "true" : "false");
  } else if (v.is_int()) {
    absl::StrAppend(out, v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_float();
    if (std::isnan(d)) {
      out->append("NaN");
    } else if (std::isinf(d)) {
      out->append(d > 0 ? "Infinity" : "-Infinity");
    } else {
      out->append(PythonFloatRepr(d));
    }
  } else if (v.is_string()) {
    AppendJsonString(v.as_string(), out);
  } else if (v.is_list()) {
    const List& l = v.as_list();
    out->push_back('[');
    for (size_t i = 0; i < l.size(); ++i) {
      if (i > 0) out->append(indent >= 0 ? "," : ", ");
      if (indent >= 0) newline(level + 1);
      RETURN_IF_ERROR(AppendJson(l[i], indent, level + 1, out));
    }
    if (indent >= 0 && !l.empty()) newline(level);
    out->push_back(']');
  } else if (v.is_dict()) {
    const Dict& d = v.as_dict();
    out->push_back('{');
    for (size_t i = 0; i < d.entries.size(); ++i) {
      if (i > 0) out->append(indent >= 0 ? "," : ", ");
      if (indent >= 0) newline(level + 1);
      AppendJsonString(d.entries[i].first, out);
      out->append(": ");
      RETURN_IF_ERROR(AppendJson(d.entries[i].second, indent, level + 1, out));
    }
    if (indent >= 0 && !d.entries.empty()) newline(level);
    out->push_back('}');
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tojson: a value of type ", v.TypeName(), " is not JSON serializable"));
  }
  return absl::OkStatus();
}

}  // namespace

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return MakeNone();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& item : json) l.push_back(FromJson(item));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, item] : json.items()) d.entries.emplace_back(k, FromJson(item));
      return Value(std::move(d));
    }
    default: return MakeNone();  // binary / discarded: not produced by the JSON parser
  }
}

bool Value::Truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().entries.empty();
  return true;  // namespace, macro
}

std::string Value::TypeName() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) return "dict";
  if (is_macro()) return "Macro";
  return "Namespace";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!Equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.as_dict();
    const Dict& y = b.as_dict();
    if (x.entries.size() != y.entries.size()) return false;
    for (const auto& [k, v] : x.entries) {
      const Value* other = y.Find(k);
      if (other == nullptr || !Equal(v, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.as_namespace() == &b.as_namespace();
  if (a.is_macro() && b.is_macro()) return &a.as_macro() == &b.as_macro();
  return false;
}

std::string PythonFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits, as Python's repr uses; then Python's layout rules.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits + std::string(static_cast<size_t>(exponent + 1 - digits.size()), '0') + ".0";
    } else {
      out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int abs_exp = exponent < 0 ? -exponent : exponent;
  return absl::StrCat(sign, out, "e", exponent < 0 ? "-" : "+", abs_exp < 10 ? "0" : "", abs_exp);
}

absl::StatusOr<std::string> ToText(const Value& value) {
  if (value.is_undefined()) return std::string();
  if (value.is_none()) return std::string("None");
  if (value.is_bool()) return std::string(value.as_bool() ? "True" : "False");
  if (value.is_int()) return absl::StrCat(value.as_int());
  if (value.is_float()) return PythonFloatRepr(value.as_float());
  if (value.is_string()) return value.as_string();
  return absl::InvalidArgumentError(absl::StrCat(
      "printing a value of type ", value.TypeName(),
      " is not supported (its Python repr is not reproduced); use |tojson"));
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent) {
  std::string out;
  if (absl::Status st = AppendJson(value, indent, 0, &out); !st.ok()) return st;
  return out;
}

std::string PythonJson(const nlohmann::ordered_json& json) {
  // Only template values (undefined, namespaces, functions) fail to serialize; JSON has none.
  absl::StatusOr<std::string> text = ToJson(Value::FromJson(json));
  return text.ok() ? *std::move(text) : json.dump();
}

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(Utf8Length(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// The code point of a one-character string.
char32_t FirstCodePoint(std::string_view cp) {
  size_t pos = 0;
  return model::utf8::DecodeAt(cp, &pos);
}

bool IsPythonSpace(char32_t c) {
  // str.isspace(): Unicode White_Space plus the information separators U+001C..U+001F.
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return true;
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string_view StripPythonSpace(std::string_view s, bool left, bool right) {
  std::vector<std::string_view> cps = CodePoints(s);
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && IsPythonSpace(FirstCodePoint(cps[begin]))) ++begin;
  }
  if (right) {
    while (end > begin && IsPythonSpace(FirstCodePoint(cps[end - 1]))) --end;
  }
  if (begin == end) return s.substr(0, 0);
  const size_t from = static_cast<size_t>(cps[begin].data() - s.data());
  const size_t to = static_cast<size_t>(cps[end - 1].data() - s.data()) + cps[end - 1].size();
  return s.substr(from, to - from);
}

}  // namespace mlaserve::router::chat_template
