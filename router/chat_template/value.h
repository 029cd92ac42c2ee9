// Value: what a chat-template expression evaluates to, with the Python semantics Jinja gives
// it (truthiness, equality, str()), because byte-for-byte agreement with transformers'
// apply_chat_template (Jinja2 on Python objects) is the contract.
//
// Lists and dicts come from the request's JSON and are immutable (transformers renders in
// an ImmutableSandboxedEnvironment); namespaces (`set ns.x = ...`), iterators (consumed once)
// cyclers / joiners and a loop's `loop` are the mutable kinds, shared between copies of the value.
// Strings are UTF-8; indexing, slicing and length count code points, as Python's str does.
//
// A List value also stands for Python's other sequences, told apart by SequenceKind because
// Jinja treats them differently: a tuple (`(a, b)`, the pairs `items()` yields) never equals
// a list and str.startswith takes one; dict views (`d.items()`, `d.keys()`, `d.values()`)
// have a len() and iterate, but take no subscript and are not JSON.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mlaserve::router::chat_template {

class Value;
using List = std::vector<Value>;
// A dict keeps insertion order (Python dicts do, and `items()` / `tojson` show it).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* Find(std::string_view key) const;
};
// `namespace(...)`: attributes a template may set from inside loops.
struct Namespace {
  std::map<std::string, Value> attributes;
};

// What Jinja's lazy filters return (map, select, reject, selectattr, rejectattr, unique,
// items, batch, slice; reverse of a list): a Python iterator. It is always true, has no len(),
// prints as an address (refused here) and yields its items once: a second loop over it
// is empty. Its items are computed when the filter runs (filters have no side effects); a
// filter failing on an element is recorded as `error`, raised when iteration reaches it,
// as the generator would raise it then.
struct Iterator {
  std::string type_name;  // Python's: "generator", "list_reverseiterator", ...
  std::vector<Value> items;
  absl::Status error;     // raised after `items`; OK: none
  size_t next = 0;        // items yielded so far
};

// A global function (range, dict, namespace, cycler, joiner, raise_exception, strftime_now)
// as a value, so that `strftime_now is defined` holds as in transformers.
struct Function {
  std::string name;
};

// cycler(...) and joiner(...) objects (Jinja's utils.Cycler / Joiner): the one piece of
// state they carry.
struct Cycler {
  std::vector<Value> items;
  size_t pos = 0;
};
struct Joiner {
  std::string separator;
  bool used = false;
};

// A for loop's `loop` (Jinja's LoopContext): one object per loop, advanced by each iteration
// (a template that keeps it sees it move on, as in Python), with loop.changed()'s memory.
struct LoopContext {
  std::vector<Value> items;  // what the loop runs over (after its filter)
  size_t index0 = 0;         // the iteration running now
  // loop.changed()'s last arguments; nullopt before its first call.
  std::optional<std::vector<Value>> last_changed;
};

struct Stmt;
struct Scope;
// A macro: a `{% macro %}` statement or a call block's body (`caller`), as a value. The
// renderer runs `definition` (owned by the parsed template, which outlives every render) in a
// new scope whose parent is `closure`, the scope the macro was defined in. That scope is
// held weakly: it usually holds the macro itself, and a strong pointer would be a cycle.
struct Macro {
  std::string name;
  const Stmt* definition = nullptr;
  std::weak_ptr<Scope> closure;
};

// An undefined variable or missing key; `name` says what was looked up, for errors.
struct Undefined {
  std::string name;
};
struct None {};

enum class SequenceKind { kList, kTuple, kDictKeys, kDictValues, kDictItems };

class Value {
 public:
  Value() : v_(Undefined{}) {}
  static Value MakeUndefined(std::string name) { return Value(Undefined{std::move(name)}); }
  static Value MakeNone() { return Value(None{}); }
  Value(bool b) : v_(b) {}  // NOLINT: implicit like Python's literals
  Value(int64_t i) : v_(i) {}  // NOLINT
  Value(double d) : v_(d) {}  // NOLINT
  Value(std::string s) : v_(std::move(s)) {}  // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(List l) : v_(std::make_shared<const List>(std::move(l))) {}  // NOLINT
  Value(Dict d) : v_(std::make_shared<const Dict>(std::move(d))) {}  // NOLINT
  Value(std::shared_ptr<Namespace> ns) : v_(std::move(ns)) {}  // NOLINT
  Value(std::shared_ptr<const Macro> m) : v_(std::move(m)) {}  // NOLINT
  Value(std::shared_ptr<Iterator> it) : v_(std::move(it)) {}  // NOLINT
  Value(Function f) : v_(std::move(f)) {}  // NOLINT
  Value(std::shared_ptr<Cycler> c) : v_(std::move(c)) {}  // NOLINT
  Value(std::shared_ptr<Joiner> j) : v_(std::move(j)) {}  // NOLINT
  Value(std::shared_ptr<LoopContext> l) : v_(std::move(l)) {}  // NOLINT
  // A tuple, dict view or list (SequenceKind).
  static Value MakeSequence(List l, SequenceKind kind) {
    Value v(std::move(l));
    v.sequence_kind_ = kind;
    return v;
  }
  static Value MakeTuple(List l) { return MakeSequence(std::move(l), SequenceKind::kTuple); }
  // What the groupby filter yields (Jinja's _GroupTuple, a namedtuple): the tuple
  // (grouper, list) with those two names as attributes too.
  static Value MakeGroupTuple(Value grouper, List list) {
    Value v = MakeTuple({std::move(grouper), Value(std::move(list))});
    v.group_tuple_ = true;
    return v;
  }
  // markupsafe's Markup (what |safe and |escape return): a str whose `+`, `%` and some
  // methods escape their other operands (builtins.h says which).
  static Value MakeMarkup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  static Value MakeIterator(std::string type_name, List items, absl::Status error = absl::OkStatus()) {
    return Value(std::make_shared<Iterator>(Iterator{std::move(type_name), std::move(items), std::move(error)}));
  }

  // JSON null -> None, numbers -> int or float, objects -> dict (in the JSON's key order).
  static Value FromJson(const nlohmann::ordered_json& json);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  // Python's numbers: bool is an int.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_markup() const { return is_string() && markup_; }
  // Any sequence of SequenceKind (list, tuple, dict view).
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(v_); }
  SequenceKind sequence_kind() const { return sequence_kind_; }
  // A list or tuple: what takes a subscript, a slice and `is sequence`.
  bool is_indexable() const {
    return is_list() && (sequence_kind_ == SequenceKind::kList || sequence_kind_ == SequenceKind::kTuple);
  }
  bool is_tuple() const { return is_list() && sequence_kind_ == SequenceKind::kTuple; }
  bool is_group_tuple() const { return is_tuple() && group_tuple_; }
  bool is_iterator() const { return std::holds_alternative<std::shared_ptr<Iterator>>(v_); }
  bool is_function() const { return std::holds_alternative<Function>(v_); }
  bool is_cycler() const { return std::holds_alternative<std::shared_ptr<Cycler>>(v_); }
  bool is_joiner() const { return std::holds_alternative<std::shared_ptr<Joiner>>(v_); }
  bool is_loop() const { return std::holds_alternative<std::shared_ptr<LoopContext>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(v_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v_); }
  bool is_macro() const { return std::holds_alternative<std::shared_ptr<const Macro>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? static_cast<int64_t>(as_bool()) : std::get<int64_t>(v_); }
  double as_float() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Macro& as_macro() const { return *std::get<std::shared_ptr<const Macro>>(v_); }
  Iterator& as_iterator() const { return *std::get<std::shared_ptr<Iterator>>(v_); }
  const Function& as_function() const { return std::get<Function>(v_); }
  Cycler& as_cycler() const { return *std::get<std::shared_ptr<Cycler>>(v_); }
  Joiner& as_joiner() const { return *std::get<std::shared_ptr<Joiner>>(v_); }
  LoopContext& as_loop() const { return *std::get<std::shared_ptr<LoopContext>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python's bool(x) (Undefined is false).
  bool Truthy() const;
  // Python's type names, for error messages ("str", "int", "list", "dict", "NoneType", ...).
  std::string TypeName() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(None n) : v_(n) {}
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const List>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
               std::shared_ptr<const Macro>, std::shared_ptr<Iterator>, Function,
               std::shared_ptr<Cycler>, std::shared_ptr<Joiner>, std::shared_ptr<LoopContext>>
      v_;
  SequenceKind sequence_kind_ = SequenceKind::kList;  // for a List
  bool group_tuple_ = false;                          // for a tuple
  bool markup_ = false;                               // for a string
};

// Python's ==, as Jinja compares (1 == 1.0 == True; Undefined equals only Undefined; a
// list never equals a tuple; keys / items views compare as sets, values views by identity;
// namespaces, macros, iterators and the other objects by identity).
bool Equal(const Value& a, const Value& b);

// What `{{ x }}` prints (Python's str()): Undefined prints nothing, None "None", booleans
// "True"/"False", floats as Python's repr, lists, tuples, dicts and dict views as their
// Python repr (PythonRepr), the loop object as "<LoopContext 1/3>". Iterators, functions,
// macros, cyclers, joiners and namespaces are refused (Python shows an address, or a
// namespace's attributes in an order we do not keep): INVALID_ARGUMENT naming the type.
absl::StatusOr<std::string> PythonStr(const Value& value);

// PythonStr of a scalar (Undefined, None, bool, number, str, the loop object); containers are
// refused too. For callers that accept only a scalar where Python would print anything (the
// DeepSeek-V3.2 encoder's message fields).
absl::StatusOr<std::string> ToText(const Value& value);

// Python's repr(): None, booleans, numbers, str (quote choice and escapes as CPython's
// unicode_repr), Markup ("Markup('...')"), Jinja's Undefined ("Undefined"), lists, tuples,
// dicts, dict views ("dict_items([('a', 1)])") and the loop object; the rest as ToText. Of
// non-ASCII text, letters and digits (str.isalnum, all printable) and common blocks of
// punctuation and symbols (value.cc's kPrintableBlocks) are rendered; another character is
// refused, naming it, as str.isprintable() is not tabled in full.
absl::StatusOr<std::string> PythonRepr(const Value& value);
// Python's ascii(): repr() with every non-ASCII character escaped (\xe9, \u4f60, \U0001f600).
absl::StatusOr<std::string> PythonAscii(const Value& value);

// Python's repr() of a float ("1.0", "1e+16", "0.1").
std::string PythonFloatRepr(double d);

// json.dumps's options, as transformers' tojson filter passes them (its defaults:
// ensure_ascii=False, no indent, default separators, keys in insertion order).
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line; else this string per level
  std::string item_separator = ", ";  // json.dumps's: ", ", or "," when indented
  std::string key_separator = ": ";
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options);
// transformers' tojson filter: json.dumps(x, ensure_ascii=False) with its default
// separators, or indented by `indent` spaces per level when indent >= 0.
absl::StatusOr<std::string> ToJson(const Value& value, int indent = -1);
// A JSON value (a request's tool schema or arguments) as ToJson writes it, i.e. as Python's
// json.dumps(x, ensure_ascii=False) does: key order kept, ", " and ": " separators.
std::string PythonJson(const nlohmann::ordered_json& json);

// UTF-8 helpers counting code points, as Python's str does. Input is valid UTF-8 (it came
// from JSON or the template).
std::vector<std::string_view> CodePoints(std::string_view s);
// Python's str.isspace() for one code point.
bool IsPythonSpace(char32_t c);
// Python's str.strip() / lstrip() / rstrip() without arguments.
std::string_view StripPythonSpace(std::string_view s, bool left, bool right);

}  // namespace mlaserve::router::chat_template
