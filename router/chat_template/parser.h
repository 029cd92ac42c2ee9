// Parser for the chat-template Jinja subset: what DeepSeek's V2 / V2.5 / V3 / R1 / V3.1
// (= V3.2-Exp) templates use, macros as other checkpoints' templates use them, and the
// common idioms around it.
//
// Statements: if / elif / else, for (one name or a pair; loop.*, else, break, continue),
// set (name or namespace attribute; block set with filters), macro (positional parameters
// with defaults), call blocks (`{% call(params) m(args) %}`, the body as `caller`).
// Expressions: literals (strings with Python escapes, ints, floats, true/false/none, lists,
// dicts), names, `.attr`, `[index]`, `[a:b:c]`, calls of namespace(), range(),
// raise_exception(), of the template's macros and of string / dict methods (keyword
// arguments too; list / dict mutators such as append and pop parse but fail when called, as
// transformers' immutable sandbox makes them fail), filters, `is` tests, not / and / or, comparisons and `in`,
// + - * / // % ** ~, unary -, and `a if b else c`.
// Everything else (filter blocks, includes, imports, with, loop filters, recursive loops,
// tuples, *args, macro parameters named varargs / kwargs / caller, calls of other names) is
// refused here, naming the construct and its line, so a template this interpreter cannot
// render fails when it is loaded, not halfway through a request. Filters, tests and methods
// are checked by name here and at render time (builtins.cc) against their own lists.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/ast.h"
#include "router/chat_template/lexer.h"

namespace mlaserve::router::chat_template {

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace mlaserve::router::chat_template
