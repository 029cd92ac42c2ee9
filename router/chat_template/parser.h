// Parser for the chat-template Jinja subset: what DeepSeek's V2 / V2.5 / V3 / R1 / V3.1
// (= V3.2-Exp) templates use, macros as other checkpoints' templates use them, Jinja's builtin
// filters and tests, and the common idioms around them.
//
// Statements: if / elif / else, for (one name or a pair; loop.*, else, break, continue, a
// loop filter `for x in xs if cond`), set (name or namespace attribute, `set x = a, b` as a
// tuple; block set with filters), macro (positional parameters with defaults), call blocks
// (`{% call(params) m(args) %}`, the body as `caller`), transformers' `{% generation %}`
// blocks (the body rendered in place, in a scope of its own).
// Expressions: literals (strings with Python escapes, ints, floats, true/false/none, lists,
// tuples, dicts), names, `.attr`, `[index]`, `[a:b:c]`, calls of the global functions (range,
// dict, namespace, cycler, joiner, raise_exception, strftime_now), of the template's macros,
// of variables it sets (a joiner) and of str / dict / list / cycler methods (keyword arguments
// too; list / dict mutators such as append and pop parse but fail when called, as
// transformers' immutable sandbox makes them fail), filters, `is` tests with their arguments
// (`is divisibleby 3`, `is sameas(x)`), not / and / or, comparisons and `in`,
// + - * / // % ** ~, unary -, and `a if b else c`.
// Everything else (filter blocks, includes, imports, with, recursive loops, tuple targets,
// *args, macro parameters named varargs / kwargs / caller, calls of other names) is
// refused here, naming the construct and its line, so a template this interpreter cannot
// render fails when it is loaded, not halfway through a request. Filters, tests and methods
// are checked by name here (builtins.h's Is*()) and applied by builtins.h.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/ast.h"
#include "router/chat_template/lexer.h"

namespace mlaserve::router::chat_template {

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace mlaserve::router::chat_template
