#include "router/chat_template/builtins.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "router/chat_template/percent_format.h"
#include "router/chat_template/python_str.h"

namespace mlaserve::router::chat_template {
namespace {

// Python index normalisation: -1 is the last element; nullopt when out of range.
std::optional<size_t> Index(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value StrLike(const Value& model, std::string s) {
  return model.is_markup() ? Value::MakeMarkup(std::move(s)) : Value(std::move(s));
}

// Jinja's LoopContext properties (cycle and changed are methods: methods.cc).
std::optional<Value> LoopAttribute(const LoopContext& loop, const std::string& name) {
  const int64_t i = static_cast<int64_t>(loop.index0);
  const int64_t n = static_cast<int64_t>(loop.items.size());
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(int64_t{1});
  if (name == "depth0") return Value(int64_t{0});
  if (name == "previtem") {
    return i > 0 ? loop.items[loop.index0 - 1] : Value::MakeUndefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < n ? loop.items[loop.index0 + 1] : Value::MakeUndefined("there is no next item");
  }
  return std::nullopt;
}

}  // namespace

Value GetAttr(const Value& object, const std::string& name) {
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().Find(name)) return *v;
  } else if (object.is_namespace()) {
    auto& attrs = object.as_namespace().attributes;
    if (auto it = attrs.find(name); it != attrs.end()) return it->second;
  } else if (object.is_cycler()) {
    // Jinja's Cycler: the `current` property and its `items` / `pos` fields.
    const Cycler& c = object.as_cycler();
    if (name == "current") return c.items[c.pos];
    if (name == "items") return Value::MakeTuple(c.items);
    if (name == "pos") return Value(static_cast<int64_t>(c.pos));
  } else if (object.is_joiner()) {
    const Joiner& j = object.as_joiner();
    if (name == "sep") return Value(j.separator);
    if (name == "used") return Value(j.used);
  } else if (object.is_group_tuple()) {
    if (name == "grouper") return object.as_list()[0];
    if (name == "list") return object.as_list()[1];
  } else if (object.is_loop()) {
    if (std::optional<Value> v = LoopAttribute(object.as_loop(), name)) return *v;
  }
  return Value::MakeUndefined(
      absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
}

Value GetItem(const Value& object, const Value& key) {
  if (key.is_string() && (object.is_dict() || object.is_namespace() || object.is_cycler() || object.is_joiner() ||
                          object.is_loop() || object.is_group_tuple())) {
    return GetAttr(object, key.as_string());
  }
  if ((key.is_int() || key.is_bool()) && (object.is_indexable() || object.is_string())) {
    if (object.is_list()) {
      if (auto i = Index(key.as_int(), object.as_list().size())) return object.as_list()[*i];
    } else {
      std::vector<std::string_view> cps = CodePoints(object.as_string());
      if (auto i = Index(key.as_int(), cps.size())) return StrLike(object, std::string(cps[*i]));
    }
  }
  std::string shown = key.is_string() ? absl::StrCat("'", key.as_string(), "'")
                                      : PythonStr(key).value_or(key.TypeName());
  return Value::MakeUndefined(
      absl::StrCat("'", object.TypeName(), " object' has no attribute or item ", shown));
}

namespace {

// The public attributes of Python's built-in types that the values of a chat template have
// (dir(), less the names starting with '_'). Those are methods (or, for numbers, data), which
// attr() returns as objects; the immutable sandbox hides the mutating ones.
bool IsPythonAttribute(const Value& v, std::string_view name) {
  static const std::set<std::string_view> kStr{
      "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
      "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
      "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
      "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
      "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
      "title", "translate", "upper", "zfill"};
  static const std::set<std::string_view> kInt{"as_integer_ratio", "bit_count", "bit_length", "conjugate",
                                               "denominator", "from_bytes", "imag", "numerator", "real",
                                               "to_bytes"};
  static const std::set<std::string_view> kFloat{"as_integer_ratio", "conjugate", "fromhex", "hex", "imag",
                                                 "is_integer", "real"};
  static const std::set<std::string_view> kList{"copy", "count", "index"};  // and the mutators
  static const std::set<std::string_view> kDict{"copy", "fromkeys", "get", "items", "keys", "values"};
  static const std::set<std::string_view> kGenerator{"close", "gi_code", "gi_frame", "gi_running",
                                                     "gi_suspended", "gi_yieldfrom", "send", "throw"};
  if (v.is_string()) {
    return kStr.count(name) > 0 || (v.is_markup() && (name == "escape" || name == "striptags" || name == "unescape"));
  }
  if (v.is_bool() || v.is_int()) return kInt.count(name) > 0;
  if (v.is_float()) return kFloat.count(name) > 0;
  if (v.is_list()) {
    switch (v.sequence_kind()) {
      case SequenceKind::kList: return kList.count(name) > 0;
      case SequenceKind::kTuple: return name == "count" || name == "index";
      case SequenceKind::kDictKeys:
      case SequenceKind::kDictItems: return name == "isdisjoint" || name == "mapping";
      case SequenceKind::kDictValues: return name == "mapping";
    }
  }
  if (v.is_dict()) return kDict.count(name) > 0;
  if (v.is_iterator()) return v.as_iterator().type_name == "generator" && kGenerator.count(name) > 0;
  return false;
}

}  // namespace

absl::StatusOr<Value> UnlessBoundMethod(const Value& object, const Value& key, Value found, bool attribute_syntax) {
  if ((!attribute_syntax && !found.is_undefined()) || !key.is_string() || !IsPythonAttribute(object, key.as_string())) {
    return found;
  }
  const std::string& name = key.as_string();
  if (object.is_number() && (name == "real" || name == "imag" || name == "numerator" || name == "denominator")) {
    return AttributeOnly(object, key);
  }
  // Jinja's bound method: defined, true, callable, no attributes; printing it (an address) is
  // refused as for any function, and so is calling it through a variable.
  return Value(Function{absl::StrCat("<bound method ", object.TypeName(), ".", name, ">")});
}

absl::StatusOr<Value> AttributeOnly(const Value& value, const Value& name_value) {
  if (!name_value.is_string()) {
    return TypeError(absl::StrCat("attribute name must be string, not '", name_value.TypeName(), "'"));
  }
  const std::string& name = name_value.as_string();
  if (value.is_undefined()) return UndefinedError(value);  // hasattr() lets UndefinedError through
  const Value missing = Value::MakeUndefined(absl::StrCat("'", value.TypeName(), " object' has no attribute '", name, "'"));
  // The sandbox answers an undefined value for names starting with '_' and for the
  // methods that change a list or dict.
  if (name.starts_with("_")) return missing;
  if (value.is_dict() && (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")) {
    return missing;
  }
  if (value.is_list() && value.sequence_kind() == SequenceKind::kList &&
      (name == "append" || name == "clear" || name == "extend" || name == "insert" || name == "pop" ||
       name == "remove" || name == "reverse" || name == "sort")) {
    return missing;
  }
  if (value.is_number() && !value.is_float()) {
    if (name == "real" || name == "numerator") return Value(value.as_int());
    if (name == "imag") return Value(int64_t{0});
    if (name == "denominator") return Value(int64_t{1});
  }
  if (value.is_float() && name == "real") return Value(value.as_float());
  if (value.is_float() && name == "imag") return Value(0.0);
  if (IsPythonAttribute(value, name) || (value.is_loop() && (name == "cycle" || name == "changed")) ||
      (value.is_cycler() && (name == "next" || name == "reset")) || (value.is_group_tuple() && (name == "count" || name == "index"))) {
    return TypeError(absl::StrCat("attr('", name, "') of a ", value.TypeName(), " is a method, which is not supported"));
  }
  if (value.is_function() || value.is_macro()) {
    return TypeError(absl::StrCat("attr() of a ", value.TypeName(), " is not supported"));
  }
  if (value.is_namespace() || value.is_cycler() || value.is_joiner() || value.is_loop() || value.is_group_tuple()) {
    return GetAttr(value, name);
  }
  return missing;
}

absl::StatusOr<Value> GetSlice(const Value& object, const Value& start_v, const Value& stop_v,
                               const Value& step_v) {
  const auto bound = [](const Value& v, std::optional<int64_t>* out) -> absl::Status {
    if (v.is_undefined() || v.is_none()) return absl::OkStatus();
    if (!v.is_int() && !v.is_bool()) return TypeError("slice indices must be integers or None");
    *out = v.as_int();
    return absl::OkStatus();
  };
  std::optional<int64_t> start, stop, step_opt;
  RETURN_IF_ERROR(bound(start_v, &start));
  RETURN_IF_ERROR(bound(stop_v, &stop));
  RETURN_IF_ERROR(bound(step_v, &step_opt));
  const int64_t step = step_opt.value_or(1);
  if (step == 0) return TypeError("slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string_view> cps;
  if (object.is_indexable()) {
    items = object.as_list();
  } else if (object.is_string()) {
    cps = CodePoints(object.as_string());
  } else if (object.is_dict()) {
    return TypeError("unhashable type: 'slice'");
  } else {
    // Jinja compiles a slice to Python's own subscript, bypassing environment.getitem (which
    // would turn the TypeError into an undefined value): None[:5] fails as in Python.
    return TypeError(absl::StrCat("'", object.TypeName(), "' object is not subscriptable"));
  }
  const int64_t n = static_cast<int64_t>(object.is_list() ? items.size() : cps.size());
  // CPython's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = adjust(start, step < 0 ? n - 1 : 0);
  const int64_t hi = adjust(stop, step < 0 ? -1 : n);
  List out_list;
  std::string out_str;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
    if (object.is_list()) {
      out_list.push_back(items[static_cast<size_t>(i)]);
    } else {
      out_str.append(cps[static_cast<size_t>(i)]);
    }
  }
  if (object.is_list()) return Value::MakeSequence(std::move(out_list), object.sequence_kind());
  return StrLike(object, std::move(out_str));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& value) {
  std::vector<Value> out;
  if (value.is_undefined()) return out;
  if (value.is_list()) return value.as_list();
  if (value.is_dict()) {
    for (const auto& [k, v] : value.as_dict().entries) out.push_back(Value(k));
    return out;
  }
  if (value.is_string()) {
    for (std::string_view c : CodePoints(value.as_string())) out.push_back(Value(std::string(c)));
    return out;
  }
  if (value.is_iterator()) {
    Iterator& it = value.as_iterator();
    out.assign(it.items.begin() + static_cast<std::ptrdiff_t>(it.next), it.items.end());
    it.next = it.items.size();
    if (!it.error.ok()) return std::exchange(it.error, absl::OkStatus());
    return out;
  }
  if (value.is_loop()) {
    // Python would run the loop's own iterator on, consuming the loop being rendered.
    return TypeError("iterating over the loop object is not supported");
  }
  return TypeError(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
}

absl::StatusOr<std::string> SoftStr(const Value& value) { return PythonStr(value); }

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  // str.__mod__ takes an Undefined operand as its argument (str() is '', repr() 'Undefined').
  if (b.is_undefined() && !(op == "%" && a.is_string())) return UndefinedError(b);
  const auto unsupported = [&] {
    if (op == "+" && a.is_string()) {
      return TypeError(absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    if (op == "+" && a.is_list() && a.sequence_kind() == b.sequence_kind()) {
      return TypeError(absl::StrCat("unsupported operand type(s) for +: '", a.TypeName(), "' and '", b.TypeName(), "'"));
    }
    return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      // markupsafe's Markup.__add__ / __radd__ escape the plain operand.
      if (a.is_markup() != b.is_markup()) {
        const std::string left = a.is_markup() ? a.as_string() : py::HtmlEscape(a.as_string());
        const std::string right = b.is_markup() ? b.as_string() : py::HtmlEscape(b.as_string());
        return Value::MakeMarkup(left + right);
      }
      return StrLike(a, a.as_string() + b.as_string());
    }
    if (a.is_indexable() && b.is_indexable() && a.sequence_kind() == b.sequence_kind()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::MakeSequence(std::move(out), a.sequence_kind());
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_indexable() ? &a : b.is_string() || b.is_indexable() ? &b : nullptr;
    const Value* times = seq == &a ? &b : &a;
    if (seq != nullptr && (times->is_int() || times->is_bool())) {
      const int64_t n = std::max<int64_t>(0, times->as_int());
      if (seq->is_string()) {
        if (static_cast<double>(n) * static_cast<double>(seq->as_string().size()) > 1e8) {
          return TypeError("the repeated string would be over 100 MB");
        }
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->as_string();
        return StrLike(*seq, std::move(out));
      }
      if (static_cast<double>(n) * static_cast<double>(seq->as_list().size()) > 1e7) {
        return TypeError("the repeated list would have over 10 million items");
      }
      List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
      return Value::MakeSequence(std::move(out), seq->sequence_kind());
    }
  }
  if (op == "%" && a.is_string()) {
    // Python's printf-style formatting.
    if (a.is_markup()) return TypeError("'%' formatting of a Markup string is not supported");
    ASSIGN_OR_RETURN(std::string text, PercentFormat(a.as_string(), b));
    return Value(std::move(text));
  }
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool ints = !a.is_float() && !b.is_float();
  const double x = a.as_float(), y = b.as_float();
  // Python's ints have no bound; a result past 64 bits is refused, never wrapped.
  const auto too_big = [] { return TypeError("integers beyond 64 bits are not supported"); };
  if (ints && (op == "+" || op == "-" || op == "*")) {
    int64_t r = 0;
    const bool overflow = op == "+"   ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
                          : op == "-" ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                                      : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    if (overflow) return too_big();
    return Value(r);
  }
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      const int64_t base = a.as_int(), exponent = b.as_int();
      if (base == 0) return Value(int64_t{exponent == 0 ? 1 : 0});
      if (base == 1) return Value(int64_t{1});
      if (base == -1) return Value(int64_t{exponent % 2 == 0 ? 1 : -1});
      int64_t p = 1;  // |base| >= 2: past 63 steps it has overflowed
      for (int64_t i = 0; i < exponent; ++i) {
        if (__builtin_mul_overflow(p, base, &p)) return too_big();
      }
      return Value(p);
    }
    // float.__pow__'s errors: a zero base to a negative power, an overflowing result; a negative
    // base to a fractional power gives a complex number, which is not reproduced.
    if (x == 0 && y < 0) return TypeError("0.0 cannot be raised to a negative power");
    if (x < 0 && std::isfinite(y) && y != std::floor(y)) return TypeError("complex numbers are not supported");
    const double p = std::pow(x, y);
    if (std::isinf(p) && std::isfinite(x) && std::isfinite(y)) return TypeError("(34, 'Numerical result out of range')");
    return Value(p);
  }
  if (y == 0) {
    if (op == "/") return TypeError("division by zero");
    return TypeError(ints ? "integer division or modulo by zero" : "float modulo");
  }
  if (op == "/") return Value(x / y);
  if (ints && (op == "//" || op == "%") && a.as_int() == INT64_MIN && b.as_int() == -1) return too_big();
  if (op == "//") {
    if (ints) return Value(FloorDiv(a.as_int(), b.as_int()));
    // CPython's float_floor_div (float_divmod): from fmod, not floor(x / y), which rounds first.
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
    if (div == 0) return Value(std::copysign(0.0, x / y));
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return Value(floordiv);
  }
  if (op == "%") {
    if (ints) return Value(a.as_int() - FloorDiv(a.as_int(), b.as_int()) * b.as_int());
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (m == 0) m = std::copysign(0.0, y);  // Python's zero takes the divisor's sign
    return Value(m);
  }
  return unsupported();
}

absl::StatusOr<bool> Order(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const auto holds = [&](int cmp) {
    if (op == "<") return cmp < 0;
    if (op == "<=") return cmp <= 0;
    if (op == ">") return cmp > 0;
    return cmp >= 0;
  };
  if (a.is_number() && b.is_number()) {
    const double x = a.as_float(), y = b.as_float();
    if (std::isnan(x) || std::isnan(y)) return false;
    return holds(x < y ? -1 : x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    return holds(a.as_string().compare(b.as_string()));  // UTF-8 byte order is code point order
  }
  if (a.is_indexable() && b.is_indexable() && a.sequence_kind() == b.sequence_kind()) {
    // Python's sequence comparison: the first elements that differ decide, else the lengths.
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!Equal(x[i], y[i])) return Order(op, x[i], y[i]);
    }
    return holds(x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0);
  }
  return TypeError(absl::StrCat("'", op, "' not supported between instances of '", a.TypeName(),
                                "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) { return Order("<", a, b); }

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return TypeError(absl::StrCat("'in <string>' requires string as left operand, not ",
                                    item.TypeName()));
    }
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) {
    if (item.is_dict() || (item.is_list() && !item.is_tuple())) {
      return TypeError(absl::StrCat("unhashable type: '", item.TypeName(), "'"));
    }
    return item.is_string() && container.as_dict().Find(item.as_string()) != nullptr;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (Equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_iterator()) {
    // Python's `in` consumes an iterator up to the match.
    Iterator& it = container.as_iterator();
    while (it.next < it.items.size()) {
      if (Equal(it.items[it.next++], item)) return true;
    }
    if (!it.error.ok()) return std::exchange(it.error, absl::OkStatus());
    return false;
  }
  if (container.is_undefined()) return false;  // Undefined iterates as empty
  return TypeError(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
}

}  // namespace mlaserve::router::chat_template
