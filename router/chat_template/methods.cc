// CallMethod: the str, dict and list methods chat templates call (Python's semantics, the
// immutable sandbox's refusals), markupsafe's Markup variants of the str ones, and the
// methods of cycler objects.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "router/chat_template/builtins.h"
#include "router/chat_template/percent_format.h"
#include "router/chat_template/python_str.h"

namespace mlaserve::router::chat_template {
namespace {

using Args = std::vector<Value>;

const std::set<std::string_view>& StrMethods() {
  static const std::set<std::string_view> k{
      "split", "rsplit", "splitlines", "strip", "lstrip", "rstrip", "startswith", "endswith", "replace", "upper",
      "lower", "title", "capitalize", "swapcase", "find", "rfind", "index", "rindex", "count", "join", "format",
      "isdigit", "isdecimal", "isalnum", "isspace", "islower", "isupper", "removeprefix", "removesuffix",
      "partition", "rpartition", "center", "ljust", "rjust", "zfill"};
  return k;
}
const std::set<std::string_view>& ListMutators() {
  static const std::set<std::string_view> k{"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  return k;
}
const std::set<std::string_view>& DictMutators() {
  static const std::set<std::string_view> k{"clear", "pop", "popitem", "setdefault", "update"};
  return k;
}

Value Text(const Value& self, std::string s) {
  return self.is_markup() ? Value::MakeMarkup(std::move(s)) : Value(std::move(s));
}

// A Markup's operand: escaped unless it is Markup itself (markupsafe's self.escape).
absl::StatusOr<std::string> MarkupOperand(const Value& self, const Value& v) {
  ASSIGN_OR_RETURN(std::string s, PythonStr(v));
  return self.is_markup() && !v.is_markup() ? py::HtmlEscape(s) : s;
}

absl::StatusOr<std::optional<int64_t>> OptionalIndex(std::string_view what, const Value& v) {
  if (v.is_none()) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t i, IntArg(what, v));
  return std::optional<int64_t>(i);
}

absl::StatusOr<std::string> StrArg(std::string_view what, const Value& v) {
  if (!v.is_string()) return TypeError(absl::StrCat(std::string(what), ": must be str, not ", v.TypeName()));
  return v.as_string();
}

// str.format with the sandbox's formatter: {} / {0} / {name} fields, .attr and [key]
// lookups, !s / !r conversions; a format spec after ':' is refused.
absl::StatusOr<std::string> StrFormat(const std::string& format, const Args& args, const KwArgs& kwargs) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return TypeError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) return TypeError("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      return TypeError("str.format: format specs (':...') are not supported");
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) return TypeError("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    size_t end = field.find_first_of(".[");
    const std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.size()) return TypeError(absl::StrCat("Replacement index ", auto_index, " out of range for positional args tuple"));
      v = args[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = std::stoul(head);
      if (k >= args.size()) return TypeError(absl::StrCat("Replacement index ", k, " out of range for positional args tuple"));
      v = args[k];
    } else {
      bool found = false;
      for (const auto& [name, value] : kwargs) {
        if (name == head) v = value, found = true;
      }
      if (!found) return TypeError(absl::StrCat("KeyError: '", head, "'"));
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        const size_t next = field.find_first_of(".[", end + 1);
        v = GetAttr(v, field.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1));
        end = next;
      } else {
        const size_t rb = field.find(']', end);
        if (rb == std::string::npos) return TypeError("Missing ']' in format string");
        const std::string key = field.substr(end + 1, rb - end - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        v = digits ? GetItem(v, Value(static_cast<int64_t>(std::stoll(key)))) : GetItem(v, Value(key));
        end = rb + 1;
      }
      if (v.is_undefined()) return TypeError(v.undefined_name());
    }
    if (conversion == 's') {
      ASSIGN_OR_RETURN(std::string s, PythonStr(v));
      out += s;
    } else if (conversion == 'r' || conversion == 'a') {
      ASSIGN_OR_RETURN(std::string s, conversion == 'a' ? PythonAscii(v) : PythonRepr(v));
      out += s;
    } else {
      return TypeError(absl::StrCat("Unknown conversion specifier ", std::string(1, conversion)));
    }
  }
  return out;
}

absl::StatusOr<Value> StrMethod(const Value& self, const std::string& name, const Args& args, const KwArgs& kwargs) {
  const std::string& s = self.as_string();
  const std::string what = absl::StrCat("str.", name, "()");
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"sep", Value::MakeNone()}, {"maxsplit", Value(int64_t{-1})}}));
    ASSIGN_OR_RETURN(std::optional<std::string> sep, OptionalStrArg(what, a[0]));
    if (sep && sep->empty()) return TypeError("empty separator");
    ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(what, a[1]));
    List out;
    for (std::string& part : name == "split" ? py::Split(s, sep, maxsplit) : py::RSplit(s, sep, maxsplit)) {
      out.push_back(Text(self, std::move(part)));
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"keepends", Value(false)}}));
    List out;
    for (std::string& line : py::SplitLines(s, a[0].Truthy())) out.push_back(Text(self, std::move(line)));
    return Value(std::move(out));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"chars", Value::MakeNone()}}, /*positional_only=*/true));
    ASSIGN_OR_RETURN(std::optional<std::string> chars, OptionalStrArg(what, a[0]));
    return Text(self, py::Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"prefix"}, {"start", Value::MakeNone()}, {"end", Value::MakeNone()}},
                                      /*positional_only=*/true));
    std::vector<std::string> affixes;
    if (a[0].is_string()) {
      affixes.push_back(a[0].as_string());
    } else if (a[0].is_tuple()) {
      for (const Value& v : a[0].as_list()) {
        if (!v.is_string()) return TypeError(absl::StrCat("tuple for ", name, " must only contain str, not ", v.TypeName()));
        affixes.push_back(v.as_string());
      }
    } else {
      return TypeError(absl::StrCat(name, " first arg must be str or a tuple of str, not ", a[0].TypeName()));
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> start, OptionalIndex(what, a[1]));
    ASSIGN_OR_RETURN(std::optional<int64_t> end, OptionalIndex(what, a[2]));
    std::string window = s;
    if (start || end) {
      ASSIGN_OR_RETURN(Value cut, GetSlice(Value(s), start ? Value(*start) : Value::MakeNone(),
                                           end ? Value(*end) : Value::MakeNone(), Value::MakeNone()));
      window = cut.as_string();
      // Python compares against the slice, but an empty affix past the end never matches.
      const int64_t n = static_cast<int64_t>(CodePoints(s).size());
      int64_t b = start.value_or(0);
      if (b < 0) b = std::max<int64_t>(0, b + n);
      if (b > n) return Value(false);
    }
    for (const std::string& affix : affixes) {
      if (name == "startswith" ? window.starts_with(affix) : window.ends_with(affix)) return Value(true);
    }
    return Value(false);
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"old"}, {"new"}, {"count", Value(int64_t{-1})}}, true));
    ASSIGN_OR_RETURN(std::string old_text, StrArg(what, a[0]));
    ASSIGN_OR_RETURN(std::string new_text, StrArg(what, a[1]));
    ASSIGN_OR_RETURN(int64_t count, IntArg(what, a[2]));
    ASSIGN_OR_RETURN(new_text, MarkupOperand(self, a[1]));
    return Text(self, py::Replace(s, old_text, new_text, count));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase") {
    RETURN_IF_ERROR(BindArgs(what, args, kwargs, {}).status());
    if (name == "upper") return Text(self, py::Upper(s));
    if (name == "lower") return Text(self, py::Lower(s));
    if (name == "title") return Text(self, py::Title(s));
    if (name == "swapcase") return Text(self, py::SwapCase(s));
    return Text(self, py::Capitalize(s));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"sub"}, {"start", Value::MakeNone()}, {"end", Value::MakeNone()}}, true));
    ASSIGN_OR_RETURN(std::string sub, StrArg(what, a[0]));
    ASSIGN_OR_RETURN(std::optional<int64_t> start, OptionalIndex(what, a[1]));
    ASSIGN_OR_RETURN(std::optional<int64_t> end, OptionalIndex(what, a[2]));
    if (name == "count") return Value(py::Count(s, sub, start, end));
    const int64_t at = py::Find(s, sub, start, end, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) return TypeError("substring not found");
    return Value(at);
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"iterable"}}, true));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(a[0]));
    std::vector<std::string> parts;
    for (const Value& item : items) {
      if (!item.is_string()) return TypeError(absl::StrCat("sequence item ", parts.size(), ": expected str instance, ", item.TypeName(), " found"));
      ASSIGN_OR_RETURN(std::string part, MarkupOperand(self, item));
      parts.push_back(std::move(part));
    }
    return Text(self, absl::StrJoin(parts, s));
  }
  if (name == "format") {
    if (self.is_markup()) return TypeError("format of a Markup string is not supported");
    ASSIGN_OR_RETURN(std::string out, StrFormat(s, args, kwargs));
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    RETURN_IF_ERROR(BindArgs(what, args, kwargs, {}).status());
    if (name == "isalnum") return Value(py::IsAlnum(s));
    if (name == "isspace") return Value(py::IsSpace(s));
    if (name == "islower") return Value(py::IsLower(s));
    if (name == "isupper") return Value(py::IsUpper(s));
    // isdigit() also counts superscripts and the like, which isdecimal() does not: refused
    // rather than guessed when the text has non-ASCII characters.
    if (name == "isdigit" && std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
      return TypeError("str.isdigit() of non-ASCII text is not supported (use isdecimal())");
    }
    return Value(py::IsDigitText(s));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"affix"}}, true));
    ASSIGN_OR_RETURN(std::string affix, StrArg(what, a[0]));
    if (name == "removeprefix" && s.starts_with(affix)) return Text(self, s.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && s.ends_with(affix)) return Text(self, s.substr(0, s.size() - affix.size()));
    return self;
  }
  if (name == "partition" || name == "rpartition") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"sep"}}, true));
    ASSIGN_OR_RETURN(std::string sep, StrArg(what, a[0]));
    if (sep.empty()) return TypeError("empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      return name == "partition" ? Value::MakeTuple({Text(self, s), Text(self, ""), Text(self, "")})
                                 : Value::MakeTuple({Text(self, ""), Text(self, ""), Text(self, s)});
    }
    return Value::MakeTuple({Text(self, s.substr(0, at)), Text(self, sep), Text(self, s.substr(at + sep.size()))});
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"width"}, {"fillchar", Value(" ")}}, true));
    ASSIGN_OR_RETURN(int64_t width, IntArg(what, a[0]));
    ASSIGN_OR_RETURN(std::string fill, StrArg(what, a[1]));
    ASSIGN_OR_RETURN(fill, MarkupOperand(self, a[1]));
    if (CodePoints(fill).size() != 1) return TypeError("The fill character must be exactly one character long");
    return Text(self, py::Pad(s, width, fill, name == "ljust" ? -1 : name == "center" ? 0 : 1));
  }
  if (name == "zfill") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"width"}}, true));
    ASSIGN_OR_RETURN(int64_t width, IntArg(what, a[0]));
    return Text(self, py::ZFill(s, width));
  }
  return TypeError(absl::StrCat("'", self.TypeName(), "' object has no method '", name, "'"));
}

absl::StatusOr<Value> SequenceMethod(const Value& self, const std::string& name, const Args& args, const KwArgs& kwargs) {
  const List& l = self.as_list();
  const std::string what = absl::StrCat(self.TypeName(), ".", name, "()");
  if (self.is_indexable() && name == "count") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"value"}}, true));
    return Value(static_cast<int64_t>(std::count_if(l.begin(), l.end(), [&](const Value& v) { return Equal(v, a[0]); })));
  }
  if (self.is_indexable() && name == "index") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"value"}, {"start", Value(int64_t{0})}, {"stop", Value(INT64_MAX)}}, true));
    const int64_t n = static_cast<int64_t>(l.size());
    ASSIGN_OR_RETURN(int64_t start, IntArg(what, a[1]));
    ASSIGN_OR_RETURN(int64_t stop, IntArg(what, a[2]));
    if (start < 0) start = std::max<int64_t>(0, start + n);
    if (stop < 0) stop = std::max<int64_t>(0, stop + n);
    for (int64_t i = start; i < std::min(stop, n); ++i) {
      if (Equal(l[static_cast<size_t>(i)], a[0])) return Value(i);
    }
    return TypeError(absl::StrCat(self.TypeName(), ".index(x): x not in ", self.TypeName()));
  }
  return TypeError(absl::StrCat("'", self.TypeName(), "' object has no method '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const Value& self, const std::string& name, const Args& args, const KwArgs& kwargs) {
  const Dict& d = self.as_dict();
  const std::string what = absl::StrCat("dict.", name, "()");
  if (name == "items" || name == "keys" || name == "values") {
    RETURN_IF_ERROR(BindArgs(what, args, kwargs, {}).status());
    List out;
    for (const auto& [k, v] : d.entries) {
      if (name == "items") out.push_back(Value::MakeTuple({Value(k), v}));
      if (name == "keys") out.push_back(Value(k));
      if (name == "values") out.push_back(v);
    }
    const SequenceKind kind = name == "items" ? SequenceKind::kDictItems
                              : name == "keys" ? SequenceKind::kDictKeys
                                               : SequenceKind::kDictValues;
    return Value::MakeSequence(std::move(out), kind);
  }
  if (name == "get") {
    ASSIGN_OR_RETURN(Args a, BindArgs(what, args, kwargs, {{"key"}, {"default", Value::MakeNone()}}, true));
    if (a[0].is_list() && !a[0].is_tuple()) return TypeError("unhashable type: 'list'");
    if (a[0].is_dict()) return TypeError("unhashable type: 'dict'");
    if (!a[0].is_string()) return a[1];
    const Value* found = d.Find(a[0].as_string());
    return found != nullptr ? *found : a[1];
  }
  return TypeError(absl::StrCat("'dict' object has no method '", name, "'"));
}

absl::StatusOr<Value> CyclerMethod(const Value& self, const std::string& name, const Args& args, const KwArgs& kwargs) {
  Cycler& c = self.as_cycler();
  RETURN_IF_ERROR(BindArgs(absl::StrCat("Cycler.", name, "()"), args, kwargs, {}).status());
  if (name == "next") {
    Value v = c.items[c.pos];
    c.pos = (c.pos + 1) % c.items.size();
    return v;
  }
  if (name == "reset") {
    c.pos = 0;
    return Value::MakeNone();
  }
  return TypeError(absl::StrCat("'Cycler' object has no method '", name, "'"));
}

// Jinja's LoopContext.cycle(*args) and changed(*args).
absl::StatusOr<Value> LoopMethod(const Value& self, const std::string& name, const Args& args, const KwArgs& kwargs) {
  LoopContext& loop = self.as_loop();
  if (name != "cycle" && name != "changed") {
    return TypeError(absl::StrCat("'LoopContext' object has no method '", name, "'"));
  }
  if (!kwargs.empty()) {
    return TypeError(absl::StrCat("LoopContext.", name, "() got an unexpected keyword argument '", kwargs[0].first, "'"));
  }
  if (name == "cycle") {
    if (args.empty()) return TypeError("no items for cycling given");
    return args[loop.index0 % args.size()];
  }
  // changed(): whether the arguments (a tuple) differ from the last call's.
  const bool same = loop.last_changed && loop.last_changed->size() == args.size() &&
                    std::equal(args.begin(), args.end(), loop.last_changed->begin(), Equal);
  if (same) return Value(false);
  loop.last_changed = args;
  return Value(true);
}

}  // namespace

bool IsKnownMethod(std::string_view name) {
  return StrMethods().count(name) > 0 || ListMutators().count(name) > 0 || DictMutators().count(name) > 0 ||
         name == "items" || name == "keys" || name == "values" || name == "get" || name == "index" ||
         name == "next" || name == "reset" || name == "cycle" || name == "changed";
}

absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name, const std::vector<Value>& args,
                                 const KwArgs& kwargs) {
  // transformers renders in Jinja's ImmutableSandboxedEnvironment, which makes the methods
  // that change a list or dict unsafe: a template calling one fails when it gets there (e.g.
  // Kimi-K2-Thinking's on a tool call), not when it is loaded.
  if ((object.sequence_kind() == SequenceKind::kList && object.is_list() && ListMutators().count(name) > 0) ||
      (object.is_dict() && DictMutators().count(name) > 0)) {
    return TypeError(absl::StrCat("access to attribute '", name, "' of '", object.TypeName(),
                                  "' object is unsafe (transformers renders chat templates in Jinja's "
                                  "immutable sandbox)"));
  }
  if (object.is_string() && StrMethods().count(name) > 0) return StrMethod(object, name, args, kwargs);
  if (object.is_list()) return SequenceMethod(object, name, args, kwargs);
  if (object.is_dict()) return DictMethod(object, name, args, kwargs);
  if (object.is_cycler()) return CyclerMethod(object, name, args, kwargs);
  if (object.is_loop()) return LoopMethod(object, name, args, kwargs);
  return TypeError(absl::StrCat("'", object.TypeName(), "' object has no method '", name, "'"));
}

}  // namespace mlaserve::router::chat_template
