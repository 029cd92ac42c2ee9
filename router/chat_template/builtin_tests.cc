// ApplyTest: Jinja2 3.1's builtin tests (tests.py), `value is name(args)`.
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/chat_template/builtins.h"
#include "router/chat_template/python_str.h"

namespace mlaserve::router::chat_template {
namespace {

using Args = std::vector<Value>;
using TestFn = std::function<absl::StatusOr<bool>(const Value&, const Args&, const KwArgs&)>;

// A test of the value alone.
TestFn Unary(std::string name, std::function<bool(const Value&)> f) {
  return [name, f = std::move(f)](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<bool> {
    RETURN_IF_ERROR(BindArgs(absl::StrCat("test '", name, "'"), a, k, {}).status());
    return f(v);
  };
}

// A test comparing the value with one argument (`other`, as Jinja's operator tests name it).
TestFn Binary(std::string name, std::string param,
              std::function<absl::StatusOr<bool>(const Value&, const Value&)> f) {
  return [name, param, f = std::move(f)](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(Args b, BindArgs(absl::StrCat("test '", name, "'"), a, k, {Param{param}}));
    return f(v, b[0]);
  };
}

// `value % n == r` with Python's %, as test_odd / test_even / test_divisibleby compute it.
absl::StatusOr<bool> ModuloIs(const Value& v, const Value& n, int64_t r) {
  ASSIGN_OR_RETURN(Value m, Arithmetic("%", v, n));
  return Equal(m, Value(r));
}

// Jinja's full list, for `is filter` / `is test` (true for names we do not render too, as
// they are in transformers' environment).
const std::set<std::string_view>& JinjaFilterNames() {
  static const std::set<std::string_view> k{
      "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
      "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "join", "last",
      "length", "list", "lower", "items", "map", "min", "max", "pprint", "random", "reject", "rejectattr",
      "replace", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags",
      "sum", "title", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap",
      "xmlattr", "tojson"};
  return k;
}

const std::map<std::string_view, TestFn>& Tests() {
  static const auto* tests = [] {
    auto* t = new std::map<std::string_view, TestFn>{
        {"defined", Unary("defined", [](const Value& v) { return !v.is_undefined(); })},
        {"undefined", Unary("undefined", [](const Value& v) { return v.is_undefined(); })},
        {"none", Unary("none", [](const Value& v) { return v.is_none(); })},
        {"boolean", Unary("boolean", [](const Value& v) { return v.is_bool(); })},
        {"false", Unary("false", [](const Value& v) { return v.is_bool() && !v.as_bool(); })},
        {"true", Unary("true", [](const Value& v) { return v.is_bool() && v.as_bool(); })},
        {"integer", Unary("integer", [](const Value& v) { return v.is_int(); })},
        {"float", Unary("float", [](const Value& v) { return v.is_float(); })},
        {"number", Unary("number", [](const Value& v) { return v.is_number(); })},
        {"string", Unary("string", [](const Value& v) { return v.is_string(); })},
        {"mapping", Unary("mapping", [](const Value& v) { return v.is_dict(); })},
        // len() and __getitem__: str, list, tuple, dict and Undefined have both.
        {"sequence", Unary("sequence", [](const Value& v) {
           return v.is_string() || v.is_indexable() || v.is_dict() || v.is_undefined();
         })},
        {"iterable", Unary("iterable", [](const Value& v) {
           return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.is_iterator() || v.is_loop();
         })},
        // Python's callable(): Jinja's Undefined has __call__ (which raises); a joiner is callable.
        {"callable", Unary("callable", [](const Value& v) {
           return v.is_macro() || v.is_function() || v.is_undefined() || v.is_joiner();
         })},
        {"escaped", Unary("escaped", [](const Value& v) { return v.is_markup(); })},
        {"lower", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<bool> {
           RETURN_IF_ERROR(BindArgs("test 'lower'", a, k, {}).status());
           ASSIGN_OR_RETURN(std::string s, SoftStr(v));
           return py::IsLower(s);
         }},
        {"upper", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<bool> {
           RETURN_IF_ERROR(BindArgs("test 'upper'", a, k, {}).status());
           ASSIGN_OR_RETURN(std::string s, SoftStr(v));
           return py::IsUpper(s);
         }},
        {"odd", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<bool> {
           RETURN_IF_ERROR(BindArgs("test 'odd'", a, k, {}).status());
           return ModuloIs(v, Value(int64_t{2}), 1);
         }},
        {"even", [](const Value& v, const Args& a, const KwArgs& k) -> absl::StatusOr<bool> {
           RETURN_IF_ERROR(BindArgs("test 'even'", a, k, {}).status());
           return ModuloIs(v, Value(int64_t{2}), 0);
         }},
        {"divisibleby", Binary("divisibleby", "num", [](const Value& v, const Value& n) { return ModuloIs(v, n, 0); })},
        {"in", Binary("in", "seq", [](const Value& v, const Value& seq) { return Contains(seq, v); })},
        {"sameas", Binary("sameas", "other", [](const Value& v, const Value& o) -> absl::StatusOr<bool> {
           // Python's `is`: singletons and shared containers have an identity we keep; small
           // ints are cached by CPython; other numbers and strings have none we can follow.
           if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
           if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
           if (v.is_int() && o.is_int() && v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256) return true;
           if (v.is_list() && o.is_list()) return &v.as_list() == &o.as_list();
           if (v.is_dict() && o.is_dict()) return &v.as_dict() == &o.as_dict();
           if (v.is_string() || v.is_number() || v.is_undefined()) {
             // Unequal values, or values of two types, are surely two objects.
             if (v.TypeName() != o.TypeName() || !Equal(v, o) || v.is_undefined()) return false;
             return TypeError(absl::StrCat("test 'sameas' on two values of type ", v.TypeName(),
                                           " is not supported (their Python identity is not reproduced)"));
           }
           return Equal(v, o);  // namespaces, macros, iterators, functions: by identity
         })},
    };
    // `is filter` / `is test` take no argument: the value is the name.
    (*t)["filter"] = Unary("filter", [](const Value& v) { return v.is_string() && JinjaFilterNames().count(v.as_string()) > 0; });
    (*t)["test"] = Unary("test", [](const Value& v) { return v.is_string() && IsKnownTest(v.as_string()); });
    const auto eq = Binary("eq", "b", [](const Value& a, const Value& b) -> absl::StatusOr<bool> { return Equal(a, b); });
    const auto ne = Binary("ne", "b", [](const Value& a, const Value& b) -> absl::StatusOr<bool> { return !Equal(a, b); });
    const auto order = [](std::string op) {
      return Binary(op, "b", [op](const Value& a, const Value& b) { return Order(op, a, b); });
    };
    for (std::string_view n : {"==", "eq", "equalto"}) (*t)[n] = eq;
    for (std::string_view n : {"!=", "ne"}) (*t)[n] = ne;
    for (std::string_view n : {">", "gt", "greaterthan"}) (*t)[n] = order(">");
    for (std::string_view n : {">=", "ge"}) (*t)[n] = order(">=");
    for (std::string_view n : {"<", "lt", "lessthan"}) (*t)[n] = order("<");
    for (std::string_view n : {"<=", "le"}) (*t)[n] = order("<=");
    return t;
  }();
  return *tests;
}

}  // namespace

bool IsKnownTest(std::string_view name) { return Tests().count(name) > 0; }

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value, const std::vector<Value>& args,
                               const KwArgs& kwargs) {
  auto it = Tests().find(name);
  if (it == Tests().end()) return absl::InvalidArgumentError(absl::StrCat("No test named '", name, "'."));
  return it->second(value, args, kwargs);
}

}  // namespace mlaserve::router::chat_template
