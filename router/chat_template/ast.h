// The parsed chat template: statements holding expressions, as Jinja2's parser builds them
// (same precedence and associativity), restricted to the subset parser.h lists.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args: items
    kTuple,     // args: items (`(a, b)`, `(a,)`, `()`)
    kDict,      // args: key, value, key, value, ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not] name
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kNot,       // not args[0]
    kAnd,       // args[0] and args[1]
    kOr,        // args[0] or args[1]
    kBinary,    // args[0] op args[1]: + - * / // % **
    kConcat,    // args joined with ~
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained, Python style)
    kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 1;
  std::string name;               // kName, kAttr, kCall (when a method), kFilter, kTest, kBinary op
  Value literal;                  // kLiteral
  std::vector<ExprPtr> args;      // children (may hold nullptr for omitted slice parts); kTest: value, then its arguments
  std::vector<std::string> ops;   // kCompare operators: == != < <= > >= in notin
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter, kTest
  bool negated = false;           // kTest: `is not`
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// One parameter of `{% macro name(a, b=1) %}` or of a call block's `{% call(a) m() %}`.
struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none (an argument not passed is Undefined)
};

struct Stmt {
  enum class Kind {
    kText,
    kPrint,
    kIf,
    kFor,
    kSet,        // {% set target = expr %}
    kSetBlock,   // {% set target [| filters] %}bodies[0]{% endset %}
    kMacro,      // {% macro name(params) %}bodies[0]{% endmacro %}
    kCallBlock,  // {% call(params) expr %}bodies[0]{% endcall %}: bodies[0] is `caller`
    // transformers' {% generation %}bodies[0]{% endgeneration %} (its AssistantTracker
    // extension): a call block whose body is called at once, with no arguments, and printed.
    kGeneration,
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 1;
  std::string text;  // kText
  // kPrint; kFor: the iterable; kSet: the value; kCallBlock: the macro call; kSetBlock: the
  // filters applied to the rendered body, over the name kBlockValueName (null: none).
  ExprPtr expr;
  // kIf: one condition per branch (if, elif...); bodies has one more entry when there is
  // an else. kFor: the loop filter (`for x in xs if cond`), when there is one.
  std::vector<ExprPtr> conditions;
  // kIf branches; kFor: [body] or [body, else body]; kSetBlock, kMacro, kCallBlock,
  // kGeneration: [body].
  std::vector<Body> bodies;
  // kFor: loop variable(s); kSet, kSetBlock: [name] or [namespace name, attribute].
  std::vector<std::string> targets;

  // kMacro, kCallBlock, kGeneration: the macro's name ("caller" for a call block's or a
  // generation block's body), its parameters,
  // and which of Jinja's implicit parameters its body reads: Jinja passes extra positional
  // arguments as `varargs`, extra keyword arguments as `kwargs` and a call block's body as
  // `caller` only to a macro whose body reads that name before assigning it.
  std::string macro_name;
  std::vector<MacroParam> params;
  bool reads_varargs = false;
  bool reads_kwargs = false;
  bool reads_caller = false;

  // For each entry of bodies that runs in a scope of its own (kFor's body and else body;
  // kSetBlock's, kMacro's and kCallBlock's body): the names Jinja's compiler starts as
  // undefined in that scope, hiding a global or outer value of that name until the scope
  // assigns it (scope_analysis.h says when). Empty for kIf, which opens no scope.
  std::vector<std::vector<std::string>> starts_undefined;
};

// kSetBlock's filter chain reads the rendered body under this name, which no template can
// spell (it is not an identifier).
inline constexpr char kBlockValueName[] = " block";

// A parsed template: its statements and the names its top-level scope starts as undefined.
struct Template {
  Body body;
  std::vector<std::string> starts_undefined;
};

}  // namespace mlaserve::router::chat_template
