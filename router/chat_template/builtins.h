// The filters, tests, methods and global functions of the chat-template subset, with the
// semantics Jinja2 3.1 gives them on Python values under transformers' environment
// (ImmutableSandboxedEnvironment, no autoescape, its own tojson, raise_exception and
// strftime_now). The parser admits exactly the names Is*() accept; each returns
// INVALID_ARGUMENT naming itself and the offending type or value where Jinja raises.
//
// Where the code lives: filters.cc (ApplyFilter), builtin_tests.cc (ApplyTest), methods.cc
// (CallMethod: str, dict and list methods), functions.cc (the globals), builtins.cc (the
// operators, attribute and item lookup, iteration).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/call_args.h"
#include "router/chat_template/strftime.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {

// `value | name(args, kwargs)`.
bool IsKnownFilter(std::string_view name);
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const std::vector<Value>& args, const KwArgs& kwargs);
// `value is name(args, kwargs)` (also `is name arg`).
bool IsKnownTest(std::string_view name);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value,
                               const std::vector<Value>& args, const KwArgs& kwargs);
// `object.name(args, kwargs)` for str, dict and list methods and cycler / joiner objects.
bool IsKnownMethod(std::string_view name);
absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                 const std::vector<Value>& args, const KwArgs& kwargs);
// The global functions (range, dict, namespace, cycler, joiner, raise_exception,
// strftime_now): their names, and their values as the outermost scope holds them.
bool IsBuiltinFunction(std::string_view name);
const std::vector<std::string>& BuiltinFunctionNames();
// A call of a function value (a global, or a joiner object); `clock` serves strftime_now.
absl::StatusOr<Value> CallFunction(const Value& function, const std::vector<Value>& args,
                                   const KwArgs& kwargs, const Clock& clock);

// Python's `obj.attr` / `obj[key]` as Jinja resolves them: a missing key or attribute gives
// Undefined (naming it); the caller refuses lookups on Undefined itself.
Value GetAttr(const Value& object, const std::string& name);
Value GetItem(const Value& object, const Value& key);
// Jinja's attr filter (do_attr): `object`'s attribute `name` through the sandbox's getattr,
// never an item. Undefined for names the object lacks, names starting with '_' and the
// sandbox's list / dict mutators; a method (which Python would print as an address) is refused.
absl::StatusOr<Value> AttributeOnly(const Value& object, const Value& name);
// `found`, what GetAttr / GetItem gave for `key`, unless Python's getattr finds a method of the
// value's type (`s.upper`, `d.items`, `x.get` without a call) where Jinja looks: first for
// `x.name` (environment.getattr: even a dict holding the key gives the method), after a missing
// item for `x[key]` and the filters' attribute= (environment.getitem). Jinja then yields a bound
// method: here a function value (defined, true, callable, without attributes; printing or
// calling it through a variable is refused), so that a template passing `schema.items` on
// gets what Jinja gives (the method, whose `.type` is undefined), not the dict's "items" entry.
// A number's data attributes (`real`, `imag`, `numerator`, `denominator`) are their values.
absl::StatusOr<Value> UnlessBoundMethod(const Value& object, const Value& key, Value found, bool attribute_syntax);
absl::StatusOr<Value> GetSlice(const Value& object, const Value& start, const Value& stop,
                               const Value& step);

// Python's binary operators (+ - * / // % **), comparisons (< <= > >=) and `in`.
absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b);
absl::StatusOr<bool> Order(const std::string& op, const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// Python's `a < b` (what sorted(), min() and max() use): numbers, strings, and lists or
// tuples element by element; other pairs are TypeErrors.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// What a for loop iterates: list items, dict keys, string characters, what an iterator has
// left (consuming it, then raising its error if it has one); Undefined is empty.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value);

// A string as Python's str() gives it for the filters that take text (Jinja's soft_str):
// Undefined is "", a Markup string keeps its text.
absl::StatusOr<std::string> SoftStr(const Value& value);

}  // namespace mlaserve::router::chat_template
