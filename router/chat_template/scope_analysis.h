// The decisions Jinja2's compiler makes about names before a template runs, which change
// what it renders, reproduced on our tree (Jinja2 3.1's idtracking.py and compiler.py):
//
//  - Which implicit parameters a macro (or a call block's body) takes: `varargs` (extra
//    positional arguments), `kwargs` (extra keyword arguments) and `caller` exist only in a
//    macro whose body reads the name before assigning it (compiler's find_undeclared).
//    Elsewhere extra arguments are an error.
//  - Which names a scope starts as undefined. A scope is the template, a for loop's
//    iteration, a macro or call-block body, a block set's body. When the first thing a
//    scope's own statements do with a name (in Jinja's visiting order: an assignment's value
//    before its target; bodies of nested loops and macros are other scopes, an if's
//    branches only maybe run) is an unconditional assignment, and no enclosing scope
//    mentions the name, Jinja compiles the name as a local that starts undefined. Until the
//    assignment runs, lookups from that scope and scopes nested in it (a loop body, a macro
//    called from the template) see undefined, not a global of that name:
//      {% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% set x = 2 %}   renders "" with x=5
//    whereas a first use that reads the name resolves it from the globals as usual.
#pragma once

#include <string>
#include <vector>

#include "router/chat_template/ast.h"

namespace mlaserve::router::chat_template {

// Fills in the reads_varargs / reads_kwargs / reads_caller and starts_undefined fields of
// every statement of `body`; returns the template scope's own starts_undefined.
std::vector<std::string> AnalyzeScopes(Body& body);

}  // namespace mlaserve::router::chat_template
