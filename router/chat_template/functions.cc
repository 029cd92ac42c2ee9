// The global functions transformers' Jinja environment has: Jinja's range (the sandbox's,
// refusing more than 100000 items), dict, namespace, cycler and joiner, and transformers'
// raise_exception and strftime_now. (lipsum is left out: it is random text.)
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/chat_template/builtins.h"

namespace mlaserve::router::chat_template {
namespace {

// dict(*args, **kwargs) as namespace() and dict() take them: one mapping or iterable of
// pairs, then keyword arguments.
absl::StatusOr<Dict> DictFrom(std::string_view what, const std::vector<Value>& args, const KwArgs& kwargs) {
  if (args.size() > 1) return TypeError(absl::StrCat(std::string(what), " expected at most 1 argument, got ", args.size()));
  Dict d;
  const auto put = [&](const Value& key, const Value& value) -> absl::Status {
    if (!key.is_string()) {
      return TypeError(absl::StrCat(std::string(what), ": unsupported key of type ", key.TypeName(), " (only strings)"));
    }
    for (auto& [k, v] : d.entries) {
      if (k == key.as_string()) {
        v = value;
        return absl::OkStatus();
      }
    }
    d.entries.emplace_back(key.as_string(), value);
    return absl::OkStatus();
  };
  if (args.size() == 1) {
    if (args[0].is_dict()) {
      d = args[0].as_dict();
    } else {
      ASSIGN_OR_RETURN(std::vector<Value> pairs, Iterate(args[0]));
      for (const Value& pair : pairs) {
        if (!pair.is_list() || pair.as_list().size() != 2) {
          return TypeError(absl::StrCat(std::string(what), ": a sequence element is not a pair"));
        }
        RETURN_IF_ERROR(put(pair.as_list()[0], pair.as_list()[1]));
      }
    }
  }
  for (const auto& [k, v] : kwargs) RETURN_IF_ERROR(put(Value(k), v));
  return d;
}

absl::StatusOr<Value> Range(const std::vector<Value>& args, const KwArgs& kwargs) {
  if (!kwargs.empty()) return TypeError("range() takes no keyword arguments");
  if (args.empty() || args.size() > 3) return TypeError(absl::StrCat("range expected 1 to 3 arguments, got ", args.size()));
  std::vector<int64_t> n;
  for (const Value& a : args) {
    ASSIGN_OR_RETURN(int64_t v, IntArg("range()", a));
    n.push_back(v);
  }
  const int64_t start = args.size() == 1 ? 0 : n[0];
  const int64_t stop = args.size() == 1 ? n[0] : n[1];
  const int64_t step = args.size() == 3 ? n[2] : 1;
  if (step == 0) return TypeError("range() arg 3 must not be zero");
  List out;
  constexpr size_t kMaxRange = 100000;  // Jinja's sandbox limit
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() == kMaxRange) return TypeError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Value(i));
  }
  return Value(std::move(out));
}

}  // namespace

const std::vector<std::string>& BuiltinFunctionNames() {
  static const std::vector<std::string> k{"range", "dict", "namespace", "cycler", "joiner", "raise_exception",
                                          "strftime_now"};
  return k;
}

bool IsBuiltinFunction(std::string_view name) {
  for (const std::string& n : BuiltinFunctionNames()) {
    if (n == name) return true;
  }
  return false;
}

absl::StatusOr<Value> CallFunction(const Value& function, const std::vector<Value>& args, const KwArgs& kwargs,
                                   const Clock& clock) {
  if (function.is_joiner()) {
    RETURN_IF_ERROR(BindArgs("joiner()", args, kwargs, {}).status());
    Joiner& j = function.as_joiner();
    if (!j.used) {
      j.used = true;
      return Value("");
    }
    return Value(j.separator);
  }
  if (!function.is_function()) return TypeError(absl::StrCat("'", function.TypeName(), "' object is not callable"));
  const std::string& name = function.as_function().name;
  if (name == "namespace") {
    ASSIGN_OR_RETURN(Dict d, DictFrom("namespace()", args, kwargs));
    auto ns = std::make_shared<Namespace>();
    for (auto& [k, v] : d.entries) ns->attributes[k] = std::move(v);
    return Value(std::move(ns));
  }
  if (name == "dict") {
    ASSIGN_OR_RETURN(Dict d, DictFrom("dict()", args, kwargs));
    return Value(std::move(d));
  }
  if (name == "range") return Range(args, kwargs);
  if (name == "cycler") {
    if (!kwargs.empty()) return TypeError("cycler() takes no keyword arguments");
    if (args.empty()) return TypeError("at least one item has to be provided");
    return Value(std::make_shared<Cycler>(Cycler{args, 0}));
  }
  if (name == "joiner") {
    ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs("joiner()", args, kwargs, {{"sep", Value(", ")}}));
    if (!a[0].is_string()) return TypeError("joiner(): sep must be a string");
    return Value(std::make_shared<Joiner>(Joiner{a[0].as_string(), false}));
  }
  if (name == "raise_exception") {
    ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs("raise_exception()", args, kwargs, {{"message"}}));
    return absl::InvalidArgumentError(
        absl::StrCat("the chat template refused the messages: ", PythonStr(a[0]).value_or("")));
  }
  if (name == "strftime_now") {
    ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs("strftime_now()", args, kwargs, {{"format"}}));
    if (!a[0].is_string()) {
      return TypeError(absl::StrCat("strftime() argument 1 must be str, not ", a[0].TypeName()));
    }
    ASSIGN_OR_RETURN(std::string text, PythonStrftime(clock(), a[0].as_string()));
    return Value(std::move(text));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported function '", name, "'"));
}

}  // namespace mlaserve::router::chat_template
