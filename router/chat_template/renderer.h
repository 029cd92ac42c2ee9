// The tree-walking renderer of a parsed chat template (ChatTemplate::Render's engine).
//
// Scoping follows Jinja2 as a chain of scopes. The render variables are the outermost
// scope and the template's top level the next; every for-loop iteration, macro call,
// call-block body and block set runs in a fresh scope whose parent is the scope it was
// written in (for a macro: where it was defined, not where it is called, so a macro never
// sees its caller's loop variables). `set` writes the innermost scope: a `set` inside a loop
// is gone at the next iteration and after the loop (namespaces are how templates carry state
// out of loops and macros). `if` opens no scope. Lookups walk the chain when they run, which
// is Jinja's late binding: a macro sees the template's top-level variables as they are when
// it is called. scope_analysis.h says which names a scope starts as undefined. Below the
// render variables sits the scope of Jinja's environment globals (range, dict, namespace,
// cycler, joiner, raise_exception, strftime_now), which a variable of the same name hides.
//
// A macro call returns its rendered body as a string (transformers renders without
// autoescape, so Jinja's macros return plain str). Macro calls nest at most
// kMaxMacroDepth deep; deeper recursion is an error naming the macro and the line.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/chat_template/ast.h"
#include "router/chat_template/strftime.h"

namespace mlaserve::router::chat_template {

// Below Jinja2's own limit: on CPython's default recursion limit of 1000, a macro recursing
// through one `if` fails with RecursionError between 150 and 200 levels deep.
inline constexpr int kMaxMacroDepth = 64;

// `variables`: the template's globals (ChatTemplate::Render); `clock`: what strftime_now
// reads. INVALID_ARGUMENT naming the template line for render errors.
absl::StatusOr<std::string> RenderTemplate(const Template& tmpl, const nlohmann::ordered_json& variables,
                                           const Clock& clock);

}  // namespace mlaserve::router::chat_template
