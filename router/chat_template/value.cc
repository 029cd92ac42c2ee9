#include "router/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "router/chat_template/python_str.h"
#include "common/status.h"

namespace mlaserve::router::chat_template {
namespace {

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  // json.dumps escapes '"', '\\' and control characters; with ensure_ascii also DEL and
  // everything beyond ASCII, as \uXXXX (surrogate pairs above U+FFFF).
  const auto escape = [&](uint32_t unit) {
    absl::StrAppend(out, "\\u", absl::Hex(unit, absl::kZeroPad4));
  };
  out->push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    switch (c) {
      case '"': out->append("\\\""); continue;
      case '\\': out->append("\\\\"); continue;
      case '\n': out->append("\\n"); continue;
      case '\r': out->append("\\r"); continue;
      case '\t': out->append("\\t"); continue;
      case '\b': out->append("\\b"); continue;
      case '\f': out->append("\\f"); continue;
      default: break;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || (ensure_ascii && u == 0x7F)) {
      escape(u);
    } else if (u < 0x80 || !ensure_ascii) {
      out->push_back(c);
    } else {
      size_t pos = i;
      const char32_t cp = model::utf8::DecodeAt(s, &pos);
      i = pos - 1;
      if (cp >= 0x10000) {
        escape(0xD800 + ((cp - 0x10000) >> 10));
        escape(0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        escape(cp);
      }
    }
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& v, const JsonOptions& o, int level, std::string* out) {
  const auto newline = [&](int lvl) {
    out->push_back('\n');
    for (int i = 0; i < lvl; ++i) out->append(*o.indent);
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
    AppendJsonString(v.as_string(), o.ensure_ascii, out);
  } else if (v.is_indexable()) {
    const List& l = v.as_list();
    out->push_back('[');
    for (size_t i = 0; i < l.size(); ++i) {
      if (i > 0) out->append(o.item_separator);
      if (o.indent) newline(level + 1);
      RETURN_IF_ERROR(AppendJson(l[i], o, level + 1, out));
    }
    if (o.indent && !l.empty()) newline(level);
    out->push_back(']');
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : v.as_dict().entries) entries.push_back(&e);
    if (o.sort_keys) {
      // UTF-8 byte order is code point order, Python's str order.
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out->push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out->append(o.item_separator);
      if (o.indent) newline(level + 1);
      AppendJsonString(entries[i]->first, o.ensure_ascii, out);
      out->append(o.key_separator);
      RETURN_IF_ERROR(AppendJson(entries[i]->second, o, level + 1, out));
    }
    if (o.indent && !entries.empty()) newline(level);
    out->push_back('}');
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tojson: Object of type ", v.TypeName(), " is not JSON serializable"));
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
  if (is_loop()) return !as_loop().items.empty();  // LoopContext has a __len__
  return true;  // namespace, macro, iterator, function, cycler, joiner
}

std::string Value::TypeName() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return markup_ ? "Markup" : "str";
  if (is_list()) {
    switch (sequence_kind_) {
      case SequenceKind::kList: return "list";
      case SequenceKind::kTuple: return group_tuple_ ? "_GroupTuple" : "tuple";
      case SequenceKind::kDictKeys: return "dict_keys";
      case SequenceKind::kDictValues: return "dict_values";
      case SequenceKind::kDictItems: return "dict_items";
    }
  }
  if (is_dict()) return "dict";
  if (is_macro()) return "Macro";
  if (is_iterator()) return as_iterator().type_name;
  if (is_function()) return "function";
  if (is_cycler()) return "Cycler";
  if (is_joiner()) return "Joiner";
  if (is_loop()) return "LoopContext";
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
    const SequenceKind kind = a.sequence_kind();
    const auto set_like = [](SequenceKind k) {
      return k == SequenceKind::kDictKeys || k == SequenceKind::kDictItems;
    };
    if (set_like(kind) && set_like(b.sequence_kind())) {
      // Keys and items views are sets: equal when each holds the other's elements.
      if (x.size() != y.size()) return false;
      for (const Value& v : x) {
        if (std::none_of(y.begin(), y.end(), [&](const Value& w) { return Equal(v, w); })) return false;
      }
      return true;
    }
    if (kind != b.sequence_kind() || kind == SequenceKind::kDictValues) return &x == &y;
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
  if (a.is_iterator() && b.is_iterator()) return &a.as_iterator() == &b.as_iterator();
  if (a.is_function() && b.is_function()) return a.as_function().name == b.as_function().name;
  if (a.is_cycler() && b.is_cycler()) return &a.as_cycler() == &b.as_cycler();
  if (a.is_joiner() && b.is_joiner()) return &a.as_joiner() == &b.as_joiner();
  if (a.is_loop() && b.is_loop()) return &a.as_loop() == &b.as_loop();
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

namespace {

// Blocks of non-alphanumeric characters str.isprintable() accepts, read off Python 3.11.7
// (Unicode 14): Latin-1's symbols, combining diacritics, Devanagari, general punctuation,
// currency, letterlike symbols, arrows, math operators, box drawing, shapes, dingbats, CJK
// punctuation, CJK compatibility forms, fullwidth forms, emoji. filters.json's
// print-printable-blocks case prints every one of them through repr(), so a block that is
// wrong here fails ChatTemplateFilterFixtureTest.
struct CodePointBlock {
  char32_t first, last;
};
constexpr CodePointBlock kPrintableBlocks[] = {
    {0x00A1, 0x00AC}, {0x00AE, 0x00FF}, {0x0300, 0x036F}, {0x0900, 0x097F},   {0x2010, 0x2027},   {0x2030, 0x205E},
    {0x20A0, 0x20C0}, {0x2100, 0x214F}, {0x2190, 0x22FF}, {0x2500, 0x257F},   {0x25A0, 0x27BF},   {0x3001, 0x303F},
    {0xFE30, 0xFE4F}, {0xFF01, 0xFF60}, {0x1F300, 0x1F64F}, {0x1F680, 0x1F6D7}, {0x1F900, 0x1F9FF}};

// Whether repr() keeps non-ASCII `c` as it is: letters and digits (str.isalnum; all printable)
// and kPrintableBlocks; nullopt where it is not known here.
std::optional<bool> ReprKeeps(char32_t c) {
  if (py::IsWordChar(c)) return true;
  for (const CodePointBlock& b : kPrintableBlocks) {
    if (c >= b.first && c <= b.last) return true;
  }
  return std::nullopt;
}

// Python's repr() (ascii_only: ascii()) of a str, as CPython's unicode_repr writes it.
absl::StatusOr<std::string> StrRepr(const std::string& s, bool ascii_only) {
  // Single quotes unless the text has a ' and no ".
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = model::utf8::DecodeAt(s, &i);
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (ascii_only) {
      if (c < 0x100) {
        absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      } else if (c < 0x10000) {
        absl::StrAppend(&out, "\\u", absl::Hex(c, absl::kZeroPad4));
      } else {
        absl::StrAppend(&out, "\\U", absl::Hex(c, absl::kZeroPad8));
      }
    } else if (ReprKeeps(c)) {
      out.append(s, start, i - start);
    } else {
      char code[16];
      std::snprintf(code, sizeof(code), "U+%04X", static_cast<unsigned>(c));
      return absl::InvalidArgumentError(absl::StrCat(
          "the repr() of a str holding ", code,
          " is not supported (which characters Python prints as escapes, str.isprintable, is known "
          "here only for letters, digits and some blocks of symbols)"));
    }
  }
  out += quote;
  return out;
}

absl::StatusOr<std::string> Repr(const Value& value, bool ascii_only) {
  if (value.is_undefined()) return std::string("Undefined");  // Jinja's Undefined.__repr__
  if (value.is_string()) {
    ASSIGN_OR_RETURN(std::string text, StrRepr(value.as_string(), ascii_only));
    if (value.is_markup()) return absl::StrCat("Markup(", text, ")");
    return text;
  }
  if (value.is_list()) {
    const List& items = value.as_list();
    std::string out;
    const auto append_items = [&](const char* open, const char* close) -> absl::Status {
      out += open;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        ASSIGN_OR_RETURN(std::string item, Repr(items[i], ascii_only));
        out += item;
      }
      if (value.is_tuple() && items.size() == 1) out += ',';
      out += close;
      return absl::OkStatus();
    };
    switch (value.sequence_kind()) {
      case SequenceKind::kList: RETURN_IF_ERROR(append_items("[", "]")); break;
      case SequenceKind::kTuple: RETURN_IF_ERROR(append_items("(", ")")); break;
      case SequenceKind::kDictKeys: RETURN_IF_ERROR(append_items("dict_keys([", "])")); break;
      case SequenceKind::kDictValues: RETURN_IF_ERROR(append_items("dict_values([", "])")); break;
      case SequenceKind::kDictItems: RETURN_IF_ERROR(append_items("dict_items([", "])")); break;
    }
    return out;
  }
  if (value.is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : value.as_dict().entries) {
      if (!first) out += ", ";
      first = false;
      ASSIGN_OR_RETURN(std::string key, StrRepr(k, ascii_only));
      ASSIGN_OR_RETURN(std::string item, Repr(v, ascii_only));
      absl::StrAppend(&out, key, ": ", item);
    }
    return out + "}";
  }
  return ToText(value);
}

}  // namespace

absl::StatusOr<std::string> PythonRepr(const Value& value) { return Repr(value, /*ascii_only=*/false); }

absl::StatusOr<std::string> PythonAscii(const Value& value) { return Repr(value, /*ascii_only=*/true); }

absl::StatusOr<std::string> PythonStr(const Value& value) {
  if (value.is_list() || value.is_dict()) return PythonRepr(value);
  return ToText(value);
}

absl::StatusOr<std::string> ToText(const Value& value) {
  if (value.is_undefined()) return std::string();
  if (value.is_none()) return std::string("None");
  if (value.is_bool()) return std::string(value.as_bool() ? "True" : "False");
  if (value.is_int()) return absl::StrCat(value.as_int());
  if (value.is_float()) return PythonFloatRepr(value.as_float());
  if (value.is_string()) return value.as_string();
  if (value.is_loop()) {
    const LoopContext& loop = value.as_loop();
    return absl::StrCat("<LoopContext ", loop.index0 + 1, "/", loop.items.size(), ">");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "printing a value of type ", value.TypeName(),
      " is not supported (its Python repr is not reproduced); use |tojson"));
}

absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  if (absl::Status st = AppendJson(value, options, 0, &out); !st.ok()) return st;
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent) {
  JsonOptions options;
  if (indent >= 0) {
    options.indent = std::string(static_cast<size_t>(indent), ' ');
    options.item_separator = ",";
  }
  return ToJson(value, options);
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
