// A JSON Schema validator for tests, written apart from the compiler: it judges parsed values
// (nlohmann::json) against the schema's JSON, with JSON Schema's own semantics (oneOf is exactly
// one, additionalProperties defaults to true, key order does not matter, 1.0 is an integer as in
// Python's jsonschema), std::regex (ECMAScript) for patterns. json_schema_fixture_test checks it
// agrees with Python's jsonschema on every fixture text, then uses it to judge the texts random
// constrained walks write.
#pragma once

#include <arpa/inet.h>

#include <cctype>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace mlaserve::model::testing {

class ReferenceValidator {
 public:
  using Json = nlohmann::json;
  explicit ReferenceValidator(Json schema) : root_(std::move(schema)) {}

  bool Valid(const Json& v) const { return Check(root_, v, 0); }

 private:
  static size_t CodePoints(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  static bool IsInteger(const Json& v) {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
           std::isfinite(v.get<double>());
  }
  static bool HasType(const Json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return IsInteger(v);
    if (t == "boolean") return v.is_boolean();
    return v.is_null();
  }
  static bool Equal(const Json& a, const Json& b) {
    if (a.is_boolean() != b.is_boolean()) return false;
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    if (a.type() != b.type()) return false;
    if (a.is_array()) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!Equal(a[i], b[i])) return false;
      }
      return true;
    }
    if (a.is_object()) {
      if (a.size() != b.size()) return false;
      for (const auto& [k, x] : a.items()) {
        if (!b.contains(k) || !Equal(x, b.at(k))) return false;
      }
      return true;
    }
    return a == b;
  }
  static bool Date(const std::string& s) {
    static const std::regex re("^([0-9]{4})-([0-9]{2})-([0-9]{2})$");
    std::smatch m;
    if (!std::regex_match(s, m, re)) return false;
    const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return y >= 1 && mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
  }
  static bool Time(const std::string& s) {
    static const std::regex re(
        "^([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3])"
        ":[0-5][0-9])$");
    return std::regex_match(s, re);
  }
  static bool Format(const std::string& f, const std::string& s) {
    if (f == "date") return Date(s);
    if (f == "time") return Time(s);
    if (f == "date-time") return s.size() > 11 && (s[10] == 'T' || s[10] == 't') &&
                                 Date(s.substr(0, 10)) && Time(s.substr(11));
    if (f == "uuid") {
      static const std::regex re("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                                 "[0-9a-fA-F]{12}$");
      return std::regex_match(s, re);
    }
    if (f == "email") return s.find('@') != std::string::npos;
    if (f == "ipv4" || f == "ipv6") {  // the C library's parser
      unsigned char buf[16];
      return inet_pton(f == "ipv4" ? AF_INET : AF_INET6, s.c_str(), buf) == 1;
    }
    if (f == "hostname") return HostName(s);
    if (f == "duration") return Duration(s);
    return true;
  }
  // fqdn's FQDN(s).is_valid: labels of 1-63 letters / digits / hyphens, no hyphen at either
  // end, two labels or more, at most 253 characters (a trailing dot aside); Python's '$' also
  // matches before one final newline.
  static bool HostName(std::string s) {
    if (s.empty() || s.size() - (s.back() == '.') > 253) return false;
    if (s.back() == '\n') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    std::vector<std::string> labels(1);
    for (char c : s) {
      if (c == '.') labels.emplace_back();
      else labels.back().push_back(c);
    }
    for (const std::string& l : labels) {
      if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
      for (char c : l) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
      }
    }
    return labels.size() >= 2;
  }
  // isoduration's parse_duration: [+-]P, then decimals each followed by a designator of
  // Y M D W (in that order, W alone unless the others are zero), optionally T and H M S.
  static bool Duration(const std::string& s) {
    static const std::regex number("^[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?$");
    if (s.size() < 2) return false;
    const size_t begin = (s[0] == '+' || s[0] == '-') ? 2 : 1;
    if (s.size() < begin || s[begin - 1] != 'P') return false;
    std::string designators = "YMDW", tmp;
    bool nonzero = false, time = false;
    for (size_t i = begin; i < s.size(); ++i) {
      const char c = s[i];
      if (!time && c == 'T') {
        if (!tmp.empty() && tmp.size() == i - begin) {
          // The date-time form (PYYYY-MM-DDThh:mm:ss or PYYYYMMDDThhmmss), which isoduration
          // hands to arrow: taken here in those two spellings only ("P1T1S" is not one).
          static const std::regex date_time("^([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}|[0-9]{8}T[0-9]{6})$");
          return std::regex_match(s.substr(begin), date_time);
        }
        if (i + 1 == s.size()) return false;
        time = true;
        designators = "HMS";
        tmp.clear();
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) && c != 'e' && c != 'E') {
        const size_t at = designators.find(c);
        if (at == std::string::npos || !std::regex_match(tmp, number)) return false;
        designators.erase(0, at + 1);
        if (!time && c == 'W' && nonzero) return false;
        nonzero = nonzero || tmp.find_first_of("123456789") != std::string::npos;
        tmp.clear();
      } else if (std::string_view("+-0123456789.,eE").find(c) != std::string_view::npos) {
        tmp.push_back(c == ',' ? '.' : c);
      } else {
        return false;
      }
    }
    return true;
  }
  // multipleOf as Python's jsonschema: an integer divisor exactly (an integer instance) or by
  // float remainder, a float divisor by float division whose quotient must be integral.
  static bool MultipleOf(const Json& d, const Json& v) {
    if (d.is_number_float()) {
      const double q = v.get<double>() / d.get<double>();
      return std::isfinite(q) && std::trunc(q) == q;
    }
    if (v.is_number_integer()) {
      const __int128 x = v.is_number_unsigned() ? static_cast<__int128>(v.get<uint64_t>())
                                                : static_cast<__int128>(v.get<int64_t>());
      return x % static_cast<__int128>(d.get<uint64_t>()) == 0;
    }
    return std::fmod(v.get<double>(), d.get<double>()) == 0;
  }

  const Json& Resolve(const std::string& ref) const {
    return ref == "#" ? root_ : root_.at(Json::json_pointer(ref.substr(1)));
  }

  bool Check(const Json& s, const Json& v, int depth) const {
    if (depth > 300) return false;
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref") && !Check(Resolve(s["$ref"]), v, depth + 1)) return false;
    if (s.contains("allOf")) {
      for (const Json& sub : s["allOf"]) {
        if (!Check(sub, v, depth + 1)) return false;
      }
    }
    if (s.contains("anyOf")) {
      bool any = false;
      for (const Json& sub : s["anyOf"]) any = any || Check(sub, v, depth + 1);
      if (!any) return false;
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const Json& sub : s["oneOf"]) n += Check(sub, v, depth + 1);
      if (n != 1) return false;
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) {
        ok = HasType(v, s["type"]);
      } else {
        for (const Json& t : s["type"]) ok = ok || HasType(v, t);
      }
      if (!ok) return false;
    }
    if (s.contains("enum")) {
      bool ok = false;
      for (const Json& e : s["enum"]) ok = ok || Equal(e, v);
      if (!ok) return false;
    }
    if (s.contains("const") && !Equal(s["const"], v)) return false;
    if (v.is_object()) {
      const Json props = s.value("properties", Json::object());
      for (const auto& [k, x] : v.items()) {
        if (props.contains(k)) {
          if (!Check(props[k], x, depth + 1)) return false;
        } else if (s.contains("additionalProperties") &&
                   !Check(s["additionalProperties"], x, depth + 1)) {
          return false;
        }
      }
      for (const Json& r : s.value("required", Json::array())) {
        if (!v.contains(r.get<std::string>())) return false;
      }
    }
    if (v.is_array()) {
      const Json prefix = s.value("prefixItems", Json::array());
      for (size_t i = 0; i < v.size(); ++i) {
        if (i < prefix.size()) {
          if (!Check(prefix[i], v[i], depth + 1)) return false;
        } else if (s.contains("items") && !Check(s["items"], v[i], depth + 1)) {
          return false;
        }
      }
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    }
    if (v.is_string()) {
      const std::string& str = v.get_ref<const std::string&>();
      if (s.contains("minLength") && CodePoints(str) < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && CodePoints(str) > s["maxLength"].get<size_t>()) return false;
      if (s.contains("pattern") &&
          !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
        return false;
      }
      if (s.contains("format") && !Format(s["format"], str)) return false;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
      if (s.contains("multipleOf") && !MultipleOf(s["multipleOf"], v)) return false;
    }
    return true;
  }

  Json root_;
};

}  // namespace mlaserve::model::testing
