#include "router/chat_template/sequence_filters.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "router/chat_template/builtins.h"
#include "router/chat_template/python_str.h"

namespace mlaserve::router::chat_template::sequence_filters {
namespace {

Value Str(std::string s) { return Value(std::move(s)); }
Value Int(int64_t i) { return Value(i); }

// Text of a str-only filter's result: Markup stays Markup where markupsafe's method keeps it.
Value SameKind(const Value& input, std::string text) {
  return input.is_markup() ? Value::MakeMarkup(std::move(text)) : Value(std::move(text));
}

// Jinja's _prepare_attribute_parts: "a.b.0" -> a, b, 0 (digit parts are ints).

std::vector<Value> AttributeParts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none() || attribute.is_undefined()) return parts;
  if (!attribute.is_string()) return {attribute};
  for (const std::string& part : py::Split(attribute.as_string(), std::string("."), -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) {
      parts.push_back(Value(static_cast<int64_t>(std::stoll(part))));
    } else {
      parts.push_back(Value(part));
    }
  }
  return parts;
}

// Jinja's make_attrgetter: environment.getitem along `parts`; a `default` (not None) replaces
// an undefined step; looking into an undefined value raises.
absl::StatusOr<Value> LookupPath(Value item, const std::vector<Value>& parts, const Value& default_value,
                                 bool ignore_case) {
  for (const Value& part : parts) {
    if (item.is_undefined()) return UndefinedError(item);
    ASSIGN_OR_RETURN(item, UnlessBoundMethod(item, part, GetItem(item, part), /*attribute_syntax=*/false));
    if (!default_value.is_none() && !default_value.is_undefined() && item.is_undefined()) item = default_value;
  }
  if (ignore_case && item.is_string()) return Value(py::Lower(item.as_string()));
  return item;
}

// Jinja's make_multi_attrgetter: a list of one key per comma-separated attribute.
absl::StatusOr<Value> MultiKey(const Value& item, const Value& attribute, bool ignore_case) {
  List keys;
  std::vector<Value> attributes;
  if (attribute.is_string()) {
    for (const std::string& a : py::Split(attribute.as_string(), std::string(","), -1)) attributes.push_back(Value(a));
  } else {
    attributes.push_back(attribute);
  }
  for (const Value& a : attributes) {
    ASSIGN_OR_RETURN(Value key, LookupPath(item, AttributeParts(a), Value::MakeNone(), ignore_case));
    keys.push_back(std::move(key));
  }
  return Value(std::move(keys));
}

// sorted(items, key=keys, reverse=reverse): stable both ways, as Python's is.

absl::Status StableSort(std::vector<Value>* items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    absl::StatusOr<bool> less = reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return absl::OkStatus();
}

// Python's hash(): what unique() can put in its seen-set.

bool Hashable(const Value& v) {
  if (v.is_list()) {
    if (!v.is_tuple()) return false;
    return std::all_of(v.as_list().begin(), v.as_list().end(), Hashable);
  }
  return !v.is_dict();
}

// The iterator a lazy filter returns: `items` and, if `error` is set, the error its

// generator raises after them.

Value Lazy(List items, absl::Status error = absl::OkStatus()) {
  return Value::MakeIterator("generator", std::move(items), std::move(error));
}

absl::StatusOr<Value> CallTestOrBool(const Value& item, const std::optional<std::string>& test, const Args& args,
                                     const KwArgs& kwargs) {
  if (!test) return Value(item.Truthy());
  ASSIGN_OR_RETURN(bool r, ApplyTest(*test, item, args, kwargs));
  return Value(r);
}

}  // namespace

// select / reject / selectattr / rejectattr (Jinja's select_or_reject).
absl::StatusOr<Value> SelectOrReject(const Value& value, const Args& args, const KwArgs& kwargs, bool select,
                                     bool lookup_attr) {
  if (!value.Truthy()) return Lazy({});
  List out;
  // Everything below runs in the generator, so its errors come when it is iterated.
  const auto run = [&]() -> absl::Status {
    size_t off = 0;
    std::vector<Value> parts;
    if (lookup_attr) {
      if (args.empty()) return TypeError("Missing parameter for attribute name");
      parts = AttributeParts(args[0]);
      off = 1;
    }
    std::optional<std::string> test;
    Args test_args;
    if (args.size() > off) {
      if (!args[off].is_string()) return TypeError(absl::StrCat("No test named ", PythonStr(args[off]).value_or("?"), "."));
      test = args[off].as_string();
      if (!IsKnownTest(*test)) return TypeError(absl::StrCat("No test named '", *test, "'."));
      test_args.assign(args.begin() + static_cast<std::ptrdiff_t>(off + 1), args.end());
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value probe, lookup_attr ? LookupPath(item, parts, Value::MakeNone(), false) : item);
      ASSIGN_OR_RETURN(Value r, CallTestOrBool(probe, test, test_args, kwargs));
      if (r.Truthy() == select) out.push_back(item);
    }
    return absl::OkStatus();
  };
  absl::Status st = run();
  return Lazy(std::move(out), std::move(st));
}

absl::StatusOr<Value> Map(const Value& value, const Args& args, const KwArgs& kwargs) {
  if (!value.Truthy()) return Lazy({});
  List out;
  const auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    const Value* attribute = nullptr;
    for (const auto& [k, v] : kwargs) {
      if (k == "attribute") attribute = &v;
    }
    if (args.empty() && attribute != nullptr) {
      Value default_value = Value::MakeNone();
      for (const auto& [k, v] : kwargs) {
        if (k == "default") {
          default_value = v;
        } else if (k != "attribute") {
          return TypeError(absl::StrCat("Unexpected keyword argument '", k, "'"));
        }
      }
      const std::vector<Value> parts = AttributeParts(*attribute);
      for (const Value& item : items) {
        ASSIGN_OR_RETURN(Value v, LookupPath(item, parts, default_value, false));
        out.push_back(std::move(v));
      }
      return absl::OkStatus();
    }
    if (args.empty()) return TypeError("map requires a filter argument");
    if (!args[0].is_string()) return TypeError("map: the filter name must be a string");
    const std::string name = args[0].as_string();
    if (!IsKnownFilter(name)) return TypeError(absl::StrCat("No filter named '", name, "'."));
    const Args rest(args.begin() + 1, args.end());
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, ApplyFilter(name, item, rest, kwargs));
      out.push_back(std::move(v));
    }
    return absl::OkStatus();
  };
  absl::Status st = run();
  return Lazy(std::move(out), std::move(st));
}

absl::StatusOr<Value> Unique(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("unique", args, kwargs, {{"case_sensitive", Value(false)}, {"attribute", Value::MakeNone()}}));
  List out;
  const auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    const std::vector<Value> parts = AttributeParts(a[1]);
    std::vector<Value> seen;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value key, LookupPath(item, parts, Value::MakeNone(), !a[0].Truthy()));
      if (!Hashable(key)) return TypeError(absl::StrCat("unhashable type: '", key.TypeName(), "'"));
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return absl::OkStatus();
  };
  absl::Status st = run();
  return Lazy(std::move(out), std::move(st));
}

absl::StatusOr<Value> MinMax(const Value& value, const Args& args, const KwArgs& kwargs, bool max) {
  ASSIGN_OR_RETURN(Args a, BindArgs(max ? "max" : "min", args, kwargs,
                                    {{"case_sensitive", Value(false)}, {"attribute", Value::MakeNone()}}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::MakeUndefined("No aggregated item, sequence was empty.");
  const std::vector<Value> parts = AttributeParts(a[1]);
  size_t best = 0;
  ASSIGN_OR_RETURN(Value best_key, LookupPath(items[0], parts, Value::MakeNone(), !a[0].Truthy()));
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value key, LookupPath(items[i], parts, Value::MakeNone(), !a[0].Truthy()));
    ASSIGN_OR_RETURN(bool better, max ? Less(best_key, key) : Less(key, best_key));
    if (better) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

absl::StatusOr<Value> Sort(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("sort", args, kwargs,
                                    {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", Value::MakeNone()}}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> keys;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, MultiKey(item, a[2], !a[1].Truthy()));
    keys.push_back(std::move(key));
  }
  RETURN_IF_ERROR(StableSort(&items, std::move(keys), a[0].Truthy()));
  return Value(std::move(items));
}

absl::StatusOr<Value> DictSort(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("dictsort", args, kwargs,
                                    {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}}));
  size_t pos;
  if (a[1].is_string() && a[1].as_string() == "key") {
    pos = 0;
  } else if (a[1].is_string() && a[1].as_string() == "value") {
    pos = 1;
  } else {
    return TypeError("You can only sort by either \"key\" or \"value\"");
  }
  if (!value.is_dict()) return TypeError(absl::StrCat("'", value.TypeName(), "' object has no attribute 'items'"));
  std::vector<Value> items, keys;
  for (const auto& [k, v] : value.as_dict().entries) {
    items.push_back(Value::MakeTuple({Value(k), v}));
    Value key = pos == 0 ? Value(k) : v;
    if (!a[0].Truthy() && key.is_string()) key = Value(py::Lower(key.as_string()));
    keys.push_back(std::move(key));
  }
  RETURN_IF_ERROR(StableSort(&items, std::move(keys), a[2].Truthy()));
  return Value(std::move(items));
}

absl::StatusOr<Value> Sum(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("sum", args, kwargs, {{"attribute", Value::MakeNone()}, {"start", Int(0)}}));
  if (a[1].is_string()) return TypeError("sum() can't sum strings [use ''.join(seq) instead]");
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const std::vector<Value> parts = AttributeParts(a[0]);
  Value total = a[1];
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, LookupPath(item, parts, Value::MakeNone(), false));
    ASSIGN_OR_RETURN(total, Arithmetic("+", total, v));
  }
  return total;
}

absl::StatusOr<Value> Join(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("join", args, kwargs, {{"d", Str("")}, {"attribute", Value::MakeNone()}}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const std::vector<Value> parts = AttributeParts(a[1]);
  std::vector<std::string> texts;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, a[1].is_none() ? item : LookupPath(item, parts, Value::MakeNone(), false));
    ASSIGN_OR_RETURN(std::string text, PythonStr(v));
    texts.push_back(std::move(text));
  }
  ASSIGN_OR_RETURN(std::string sep, PythonStr(a[0]));
  return Str(absl::StrJoin(texts, sep));
}

absl::StatusOr<Value> First(const Value& value) {
  if (value.is_iterator()) {
    Iterator& it = value.as_iterator();
    if (it.next < it.items.size()) return it.items[it.next++];
    if (!it.error.ok()) return std::exchange(it.error, absl::OkStatus());
    return Value::MakeUndefined("No first item, sequence was empty.");
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::MakeUndefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> Last(const Value& value) {
  if (value.is_iterator()) return TypeError(absl::StrCat("'", value.TypeName(), "' object is not reversible"));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::MakeUndefined("No last item, sequence was empty.");
  return items.back();
}

absl::StatusOr<Value> Reverse(const Value& value) {
  if (value.is_string()) {
    std::vector<std::string_view> cps = CodePoints(value.as_string());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.append(*it);
    return SameKind(value, std::move(out));
  }
  if (value.is_iterator()) {
    // reversed() refuses a generator; Jinja then reverses list(value).
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (value.is_undefined() || value.is_list() || value.is_dict()) {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::reverse(items.begin(), items.end());
    return Value::MakeIterator(value.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator", std::move(items));
  }
  return TypeError("argument must be iterable");
}

absl::StatusOr<Value> Batch(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("batch", args, kwargs, {{"linecount"}, {"fill_with", Value::MakeNone()}}));
  List out;
  const auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(int64_t linecount, IntArg("batch", a[0]));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    List tmp;
    for (const Value& item : items) {
      if (static_cast<int64_t>(tmp.size()) == linecount) out.push_back(Value(std::exchange(tmp, {})));
      tmp.push_back(item);
    }
    if (!tmp.empty()) {
      if (!a[1].is_none()) {
        while (static_cast<int64_t>(tmp.size()) < linecount) tmp.push_back(a[1]);
      }
      out.push_back(Value(std::move(tmp)));
    }
    return absl::OkStatus();
  };
  absl::Status st = run();
  return Lazy(std::move(out), std::move(st));
}

absl::StatusOr<Value> SliceFilter(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("slice", args, kwargs, {{"slices"}, {"fill_with", Value::MakeNone()}}));
  List out;
  const auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<Value> seq, Iterate(value));
    ASSIGN_OR_RETURN(int64_t slices, IntArg("slice", a[0]));
    if (slices == 0) return TypeError("integer division or modulo by zero");
    if (slices < 0) return TypeError("slice: a negative number of slices is not supported");
    const int64_t length = static_cast<int64_t>(seq.size());
    const int64_t per = length / slices, extra = length % slices;
    int64_t offset = 0;
    for (int64_t k = 0; k < slices; ++k) {
      const int64_t start = offset + k * per;
      if (k < extra) ++offset;
      const int64_t end = offset + (k + 1) * per;
      List tmp(seq.begin() + start, seq.begin() + end);
      if (!a[1].is_none() && k >= extra) tmp.push_back(a[1]);
      out.push_back(Value(std::move(tmp)));
    }
    return absl::OkStatus();
  };
  absl::Status st = run();
  return Lazy(std::move(out), std::move(st));
}

absl::StatusOr<Value> Items(const Value& value) {
  if (value.is_undefined()) return Lazy({});
  if (!value.is_dict()) return Lazy({}, TypeError("Can only get item pairs from a mapping."));
  List out;
  for (const auto& [k, v] : value.as_dict().entries) out.push_back(Value::MakeTuple({Value(k), v}));
  return Lazy(std::move(out));
}

// Jinja's sync_do_groupby: sorted(value, key=k), then itertools.groupby(..., k): one
// (grouper, list) per run of equal keys. Case-insensitive by default, the grouper then the
// first item's own value (its case).
absl::StatusOr<Value> GroupBy(const Value& value, const Args& args, const KwArgs& kwargs) {
  ASSIGN_OR_RETURN(Args a, BindArgs("groupby", args, kwargs,
                                    {{"attribute"}, {"default", Value::MakeNone()}, {"case_sensitive", Value(false)}}));
  const std::vector<Value> parts = AttributeParts(a[0]);
  const bool ignore_case = !a[2].Truthy();
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> keys;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, LookupPath(item, parts, a[1], ignore_case));
    keys.push_back(std::move(key));
  }
  RETURN_IF_ERROR(StableSort(&items, keys, /*reverse=*/false));
  keys.clear();  // the sorted items' keys, computed again as Python's groupby does
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, LookupPath(item, parts, a[1], ignore_case));
    keys.push_back(std::move(key));
  }
  List out;
  for (size_t i = 0; i < items.size();) {
    size_t j = i + 1;
    while (j < items.size() && Equal(keys[j], keys[i])) ++j;
    Value grouper = keys[i];
    if (ignore_case) {
      ASSIGN_OR_RETURN(grouper, LookupPath(items[i], parts, a[1], false));
    }
    out.push_back(Value::MakeGroupTuple(std::move(grouper), List(items.begin() + static_cast<std::ptrdiff_t>(i),
                                                                  items.begin() + static_cast<std::ptrdiff_t>(j))));
    i = j;
  }
  return Value(std::move(out));
}

}  // namespace mlaserve::router::chat_template::sequence_filters
