#include "router/chat_template/builtins.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace mlaserve::router::chat_template {
namespace {

absl::Status TypeError(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_name().empty() ? "a value is undefined"
                                                               : v.undefined_name());
}

// The one keyword/positional argument `name` at `index`, or `fallback`.
Value Arg(const std::vector<Value>& args, const KwArgs& kwargs, size_t index,
          std::string_view name, Value fallback) {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

absl::Status CheckArity(const std::string& what, const std::vector<Value>& args,
                        const KwArgs& kwargs, size_t max_args,
                        std::initializer_list<std::string_view> keywords) {
  if (args.size() > max_args) {
    return TypeError(absl::StrCat(what, " takes at most ", max_args, " arguments (", args.size(),
                                  " given)"));
  }
  for (const auto& [k, v] : kwargs) {
    if (std::find(keywords.begin(), keywords.end(), k) == keywords.end()) {
      return TypeError(absl::StrCat(what, " got an unexpected keyword argument '", k, "'"));
    }
  }
  return absl::OkStatus();
}

// Python index normalisation: -1 is the last element; nullopt when out of range.
std::optional<size_t> Index(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

std::string JoinCodePoints(const std::vector<std::string_view>& cps, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) out.append(cps[i]);
  return out;
}

absl::StatusOr<Value> Split(const std::string& s, const Value& sep_value, int64_t maxsplit) {
  List parts;
  if (sep_value.is_none() || sep_value.is_undefined()) {
    // Runs of whitespace separate; leading and trailing whitespace give no empty parts.
    std::vector<std::string_view> cps = CodePoints(s);
    size_t i = 0;
    const auto space = [&](size_t k) { return StripPythonSpace(cps[k], true, false).empty(); };
    while (i < cps.size()) {
      while (i < cps.size() && space(i)) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        std::string rest = JoinCodePoints(cps, i, cps.size());
        parts.push_back(Value(std::string(StripPythonSpace(rest, false, true))));
        break;
      }
      const size_t start = i;
      while (i < cps.size() && !space(i)) ++i;
      parts.push_back(Value(JoinCodePoints(cps, start, i)));
    }
    return Value(std::move(parts));
  }
  if (!sep_value.is_string()) {
    return TypeError(absl::StrCat("str.split: must be str or None, not ", sep_value.TypeName()));
  }
  const std::string& sep = sep_value.as_string();
  if (sep.empty()) return TypeError("str.split: empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    parts.push_back(Value(s.substr(start, at - start)));
    start = at + sep.size();
  }
  parts.push_back(Value(s.substr(start)));
  return Value(std::move(parts));
}

std::string StripChars(const std::string& s, const std::string& chars, bool left, bool right) {
  std::vector<std::string_view> cps = CodePoints(s);
  std::set<std::string_view> strip;
  for (std::string_view c : CodePoints(chars)) strip.insert(c);
  size_t begin = 0, end = cps.size();
  if (left) while (begin < end && strip.count(cps[begin]) > 0) ++begin;
  if (right) while (end > begin && strip.count(cps[end - 1]) > 0) --end;
  return JoinCodePoints(cps, begin, end);
}

std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    // Python inserts `with` before every character and at the end.
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
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += with;
    start = at + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value GetAttr(const Value& object, const std::string& name) {
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().Find(name)) return *v;
  } else if (object.is_namespace()) {
    auto& attrs = object.as_namespace().attributes;
    if (auto it = attrs.find(name); it != attrs.end()) return it->second;
  }
  return Value::MakeUndefined(
      absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
}

Value GetItem(const Value& object, const Value& key) {
  if (key.is_string() && (object.is_dict() || object.is_namespace())) {
    return GetAttr(object, key.as_string());
  }
  if ((key.is_int() || key.is_bool()) && (object.is_list() || object.is_string())) {
    if (object.is_list()) {
      if (auto i = Index(key.as_int(), object.as_list().size())) return object.as_list()[*i];
    } else {
      std::vector<std::string_view> cps = CodePoints(object.as_string());
      if (auto i = Index(key.as_int(), cps.size())) return Value(std::string(cps[*i]));
    }
  }
  std::string shown = key.is_string() ? absl::StrCat("'", key.as_string(), "'")
                                      : ToText(key).value_or(key.TypeName());
  return Value::MakeUndefined(
      absl::StrCat("'", object.TypeName(), " object' has no attribute or item ", shown));
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
  if (object.is_list()) {
    items = object.as_list();
  } else if (object.is_string()) {
    cps = CodePoints(object.as_string());
  } else {
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
  return object.is_list() ? Value(std::move(out_list)) : Value(std::move(out_str));
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
  return TypeError(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const std::vector<Value>& args, const KwArgs& kwargs) {
  const std::string what = absl::StrCat("filter '", name, "'");
  if (name == "length" || name == "count") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 0, {}));
    if (value.is_undefined()) return Value(int64_t{0});
    if (value.is_string()) return Value(static_cast<int64_t>(CodePoints(value.as_string()).size()));
    if (value.is_list()) return Value(static_cast<int64_t>(value.as_list().size()));
    if (value.is_dict()) return Value(static_cast<int64_t>(value.as_dict().entries.size()));
    return TypeError(absl::StrCat("object of type '", value.TypeName(), "' has no len()"));
  }
  if (name == "trim") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 1, {"chars"}));
    ASSIGN_OR_RETURN(std::string text, ToText(value));
    const Value chars = Arg(args, kwargs, 0, "chars", Value::MakeNone());
    if (chars.is_none()) return Value(std::string(StripPythonSpace(text, true, true)));
    if (!chars.is_string()) return TypeError("filter 'trim': chars must be a string");
    return Value(StripChars(text, chars.as_string(), true, true));
  }
  if (name == "string") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 0, {}));
    ASSIGN_OR_RETURN(std::string text, ToText(value));
    return Value(std::move(text));
  }
  if (name == "default" || name == "d") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 2, {"default_value", "boolean"}));
    const Value fallback = Arg(args, kwargs, 0, "default_value", Value(""));
    const bool boolean = Arg(args, kwargs, 1, "boolean", Value(false)).Truthy();
    if (value.is_undefined() || (boolean && !value.Truthy())) return fallback;
    return value;
  }
  if (name == "first" || name == "last") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 0, {}));
    if (name == "last" && value.is_dict()) return TypeError("filter 'last': a dict is not reversible");
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.empty()) return Value::MakeUndefined(absl::StrCat("filter '", name, "' of an empty sequence"));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 1, {"d"}));
    const Value sep = Arg(args, kwargs, 0, "d", Value(""));
    ASSIGN_OR_RETURN(std::string sep_text, ToText(sep));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::vector<std::string> parts;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(std::string text, ToText(item));
      parts.push_back(std::move(text));
    }
    return Value(absl::StrJoin(parts, sep_text));
  }
  if (name == "tojson") {
    RETURN_IF_ERROR(CheckArity(what, args, kwargs, 1, {"indent"}));
    const Value indent = Arg(args, kwargs, 0, "indent", Value::MakeNone());
    if (!indent.is_none() && !indent.is_int()) return TypeError("filter 'tojson': indent must be an integer");
    for (const auto& [k, v] : kwargs) {
      if (k != "indent") return TypeError(absl::StrCat("filter 'tojson': unsupported argument '", k, "'"));
    }
    ASSIGN_OR_RETURN(std::string json, ToJson(value, indent.is_none() ? -1 : static_cast<int>(indent.as_int())));
    return Value(std::move(json));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", name, "'"));
}

bool ApplyTest(const std::string& name, const Value& v) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  // Python's callable(): Jinja's Undefined has __call__ (which raises) and so is callable.
  if (name == "callable") return v.is_macro() || v.is_undefined();
  // Jinja asks for len() and __getitem__, which Undefined has too.
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  return false;  // the parser admits no other test
}

absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                 const std::vector<Value>& args, const KwArgs& kwargs) {
  const std::string what = absl::StrCat(object.TypeName(), ".", name, "()");
  // transformers renders in Jinja's ImmutableSandboxedEnvironment, which makes the methods
  // that change a list or dict unsafe: a template calling one fails when it gets there (e.g.
  // Kimi-K2-Thinking's on a tool call), not when it is loaded.
  static const std::set<std::string_view> kListMutators{"append", "extend", "insert", "pop", "remove",
                                                        "reverse", "sort", "clear"};
  static const std::set<std::string_view> kDictMutators{"clear", "pop", "popitem", "setdefault", "update"};
  if ((object.is_list() && kListMutators.count(name) > 0) ||
      (object.is_dict() && kDictMutators.count(name) > 0)) {
    return TypeError(absl::StrCat("access to attribute '", name, "' of '", object.TypeName(),
                                  "' object is unsafe (transformers renders chat templates in Jinja's "
                                  "immutable sandbox)"));
  }
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "split") {
      RETURN_IF_ERROR(CheckArity(what, args, kwargs, 2, {"sep", "maxsplit"}));
      const Value maxsplit = Arg(args, kwargs, 1, "maxsplit", Value(int64_t{-1}));
      if (!maxsplit.is_int()) return TypeError(absl::StrCat(what, ": maxsplit must be an integer"));
      return Split(s, Arg(args, kwargs, 0, "sep", Value::MakeNone()), maxsplit.as_int());
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      RETURN_IF_ERROR(CheckArity(what, args, kwargs, 1, {}));
      const Value chars = Arg(args, kwargs, 0, "", Value::MakeNone());
      const bool left = name != "rstrip", right = name != "lstrip";
      if (chars.is_none()) return Value(std::string(StripPythonSpace(s, left, right)));
      if (!chars.is_string()) return TypeError(absl::StrCat(what, ": arg must be None or str"));
      return Value(StripChars(s, chars.as_string(), left, right));
    }
    if (name == "startswith" || name == "endswith") {
      RETURN_IF_ERROR(CheckArity(what, args, kwargs, 1, {}));
      if (args.size() != 1 || !args[0].is_string()) {
        return TypeError(absl::StrCat(what, " takes one str argument here"));
      }
      const std::string& affix = args[0].as_string();
      return Value(name == "startswith" ? s.starts_with(affix) : s.ends_with(affix));
    }
    if (name == "replace") {
      RETURN_IF_ERROR(CheckArity(what, args, kwargs, 3, {}));
      if (args.size() < 2 || !args[0].is_string() || !args[1].is_string() ||
          (args.size() == 3 && !args[2].is_int())) {
        return TypeError(absl::StrCat(what, " takes (old: str, new: str[, count: int])"));
      }
      return Value(Replace(s, args[0].as_string(), args[1].as_string(),
                           args.size() == 3 ? args[2].as_int() : -1));
    }
  } else if (object.is_dict()) {
    const Dict& d = object.as_dict();
    if (name == "items" || name == "keys" || name == "values") {
      RETURN_IF_ERROR(CheckArity(what, args, kwargs, 0, {}));
      List out;
      for (const auto& [k, v] : d.entries) {
        if (name == "items") out.push_back(Value(List{Value(k), v}));
        if (name == "keys") out.push_back(Value(k));
        if (name == "values") out.push_back(v);
      }
      return Value(std::move(out));
    }
    if (name == "get") {
      RETURN_IF_ERROR(CheckArity(what, args, kwargs, 2, {}));
      if (args.empty()) return TypeError("dict.get() takes a key");
      const Value fallback = args.size() > 1 ? args[1] : Value::MakeNone();
      if (!args[0].is_string()) return fallback;
      const Value* found = d.Find(args[0].as_string());
      return found != nullptr ? *found : fallback;
    }
  }
  return TypeError(absl::StrCat("'", object.TypeName(), "' object has no method '", name, "'"));
}

bool IsBuiltinFunction(std::string_view name) {
  return name == "namespace" || name == "range" || name == "raise_exception";
}

absl::StatusOr<Value> CallFunction(const std::string& name, const std::vector<Value>& args,
                                   const KwArgs& kwargs) {
  if (name == "namespace") {
    auto ns = std::make_shared<Namespace>();
    if (args.size() > 1) return TypeError("namespace() takes at most one positional argument");
    if (args.size() == 1) {
      if (!args[0].is_dict()) return TypeError("namespace(): the positional argument must be a dict");
      for (const auto& [k, v] : args[0].as_dict().entries) ns->attributes[k] = v;
    }
    for (const auto& [k, v] : kwargs) ns->attributes[k] = v;
    return Value(std::move(ns));
  }
  if (name == "range") {
    if (!kwargs.empty() || args.empty() || args.size() > 3) {
      return TypeError("range() takes 1 to 3 integer arguments");
    }
    for (const Value& a : args) {
      if (!a.is_int() && !a.is_bool()) return TypeError("range(): arguments must be integers");
    }
    const int64_t start = args.size() == 1 ? 0 : args[0].as_int();
    const int64_t stop = args.size() == 1 ? args[0].as_int() : args[1].as_int();
    const int64_t step = args.size() == 3 ? args[2].as_int() : 1;
    if (step == 0) return TypeError("range() arg 3 must not be zero");
    List out;
    constexpr size_t kMaxRange = 100000;  // Jinja's sandbox limit
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() == kMaxRange) return TypeError("range() is too big (more than 100000 items)");
      out.push_back(Value(i));
    }
    return Value(std::move(out));
  }
  if (name == "raise_exception") {
    const Value message = Arg(args, kwargs, 0, "message", Value(""));
    return absl::InvalidArgumentError(
        absl::StrCat("the chat template refused the messages: ", ToText(message).value_or("")));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported function '", name, "'"));
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const auto unsupported = [&] {
    if (op == "+" && a.is_string()) {
      return TypeError(absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* times = seq == &a ? &b : &a;
    if (seq != nullptr && (times->is_int() || times->is_bool())) {
      const int64_t n = std::max<int64_t>(0, times->as_int());
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->as_string();
        return Value(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
      return Value(std::move(out));
    }
  }
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool ints = !a.is_float() && !b.is_float();
  const double x = a.as_float(), y = b.as_float();
  if (op == "+") return ints ? Value(a.as_int() + b.as_int()) : Value(x + y);
  if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(x - y);
  if (op == "*") return ints ? Value(a.as_int() * b.as_int()) : Value(x * y);
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return Value(r);
    }
    return Value(std::pow(x, y));
  }
  if (y == 0) return TypeError(op == "/" ? "division by zero" : "integer division or modulo by zero");
  if (op == "/") return Value(x / y);
  if (op == "//") return ints ? Value(FloorDiv(a.as_int(), b.as_int())) : Value(std::floor(x / y));
  if (op == "%") {
    if (ints) return Value(a.as_int() - FloorDiv(a.as_int(), b.as_int()) * b.as_int());
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  return unsupported();
}

absl::StatusOr<bool> Order(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  int cmp;
  if (a.is_number() && b.is_number()) {
    const double x = a.as_float(), y = b.as_float();
    cmp = x < y ? -1 : x > y ? 1 : 0;
  } else if (a.is_string() && b.is_string()) {
    cmp = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
  } else {
    return TypeError(absl::StrCat("'", op, "' not supported between instances of '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
  }
  if (op == "<") return cmp < 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  return cmp >= 0;
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return TypeError(absl::StrCat("'in <string>' requires string as left operand, not ",
                                    item.TypeName()));
    }
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().Find(item.as_string()) != nullptr;
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (Equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;  // Undefined iterates as empty
  return TypeError(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
}

}  // namespace mlaserve::router::chat_template
