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
  std::vector<ExprPtr> args;      // children (may hold nullptr for omitted slice parts)
  std::vector<std::string> ops;   // kCompare operators: == != < <= > >= in notin
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter
  bool negated = false;           // kTest: `is not`
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { kText, kPrint, kIf, kFor, kSet, kBreak, kContinue };
  Kind kind;
  int line = 1;
  std::string text;  // kText
  ExprPtr expr;      // kPrint; kFor: the iterable; kSet: the value
  // kIf: one condition per branch (if, elif...); bodies has one more entry when there is
  // an else.
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;  // kIf branches; kFor: [body] or [body, else body]
  std::vector<std::string> targets;  // kFor: loop variable(s); kSet: [name] or [name, attr]
};

}  // namespace mlaserve::router::chat_template
