// Python's printf-style string formatting (`"%s: %d" % (a, b)`), which the `format` filter
// and the `%` operator on a string apply: %s, %d / %i / %u, %o, %x / %X, %e / %E, %f / %F,
// %g / %G, %c, %r / %a (PythonRepr / PythonAscii) and %%, with flags, width,
// precision, `*` and %(key)s mapping keys. Errors are Python's TypeErrors and ValueErrors
// (not enough arguments, not all arguments converted, a bad type for a conversion).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {

// `format % args`: `args` a tuple gives the arguments in order, a dict the mapping for
// %(key)s, anything else is the one argument.
absl::StatusOr<std::string> PercentFormat(std::string_view format, const Value& args);

}  // namespace mlaserve::router::chat_template
