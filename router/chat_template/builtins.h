// The filters, tests, methods and global functions of the chat-template subset, with the
// semantics Jinja2 gives them on Python values. The parser admits exactly these names
// (parser.cc); each returns INVALID_ARGUMENT naming itself and the offending type or value.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {

using KwArgs = std::vector<std::pair<std::string, Value>>;

// `value | name(args, kwargs)`.
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const std::vector<Value>& args, const KwArgs& kwargs);
// `value is name`.
bool ApplyTest(const std::string& name, const Value& value);
// `object.name(args, kwargs)` for str and dict methods.
absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                 const std::vector<Value>& args, const KwArgs& kwargs);
// Whether `name` is one of the global functions below (a template's own macros are the
// renderer's).
bool IsBuiltinFunction(std::string_view name);
// namespace(...), range(...), raise_exception(...).
absl::StatusOr<Value> CallFunction(const std::string& name, const std::vector<Value>& args,
                                   const KwArgs& kwargs);

// Python's `obj.attr` / `obj[key]` as Jinja resolves them: a missing key or attribute gives
// Undefined (naming it); the caller refuses lookups on Undefined itself.
Value GetAttr(const Value& object, const std::string& name);
Value GetItem(const Value& object, const Value& key);
absl::StatusOr<Value> GetSlice(const Value& object, const Value& start, const Value& stop,
                               const Value& step);

// Python's binary operators (+ - * / // % **), comparisons (< <= > >=) and `in`.
absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b);
absl::StatusOr<bool> Order(const std::string& op, const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// What a for loop iterates: list items, dict keys, string characters; Undefined is empty.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value);

}  // namespace mlaserve::router::chat_template
