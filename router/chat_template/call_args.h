// Binding a call's arguments to a Python signature, for the builtins (filters, tests, methods,
// global functions): Python's rules, so that a call Jinja refuses (too many arguments, an
// unknown or repeated keyword, a missing required one) is refused here too, naming the callee.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {

using KwArgs = std::vector<std::pair<std::string, Value>>;

struct Param {
  std::string_view name;
  std::optional<Value> default_value = std::nullopt;  // nullopt: required
};

// The arguments in `params` order, defaults filled in. `positional_only`: keywords are
// refused (most str methods).
absl::StatusOr<std::vector<Value>> BindArgs(std::string_view what, const std::vector<Value>& args,
                                            const KwArgs& kwargs, std::initializer_list<Param> params,
                                            bool positional_only = false);

inline absl::Status TypeError(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// The error Jinja's Undefined raises when used (named after what was looked up).
absl::Status UndefinedError(const Value& v);

// Python's int argument (bool counts): INVALID_ARGUMENT naming `what` otherwise.
absl::StatusOr<int64_t> IntArg(std::string_view what, const Value& v);
// A str argument, or None (nullopt); anything else is refused naming `what`.
absl::StatusOr<std::optional<std::string>> OptionalStrArg(std::string_view what, const Value& v);

}  // namespace mlaserve::router::chat_template
