#include "router/chat_template/renderer.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/chat_template/builtins.h"

namespace mlaserve::router::chat_template {

// One scope of the chain renderer.h describes; a macro holds its defining scope weakly.
struct Scope {
  std::map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

namespace {

class Renderer {
 public:
  Renderer(const Template& tmpl, const nlohmann::ordered_json& variables, const Clock& clock)
      : tmpl_(tmpl), clock_(clock) {
    // Jinja's environment globals sit below the render variables, which may shadow them.
    auto functions = std::make_shared<Scope>();
    for (const std::string& name : BuiltinFunctionNames()) functions->vars[name] = Value(Function{name});
    auto globals = std::make_shared<Scope>();
    globals->parent = std::move(functions);
    if (variables.is_object()) {
      for (const auto& [k, v] : variables.items()) globals->vars[k] = Value::FromJson(v);
    }
    scope_ = NewScope(std::move(globals), tmpl.starts_undefined);  // the template's top level
  }

  absl::StatusOr<std::string> Run() {
    RETURN_IF_ERROR(Exec(tmpl_.body).status());
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  static std::shared_ptr<Scope> NewScope(std::shared_ptr<Scope> parent,
                                         const std::vector<std::string>& starts_undefined) {
    auto scope = std::make_shared<Scope>();
    scope->parent = std::move(parent);
    for (const std::string& name : starts_undefined) {
      scope->vars[name] = Value::MakeUndefined(absl::StrCat("'", name, "' is undefined"));
    }
    return scope;
  }
  static const std::vector<std::string>& StartsUndefined(const Stmt& s, size_t body) {
    static const std::vector<std::string> kNone;
    return body < s.starts_undefined.size() ? s.starts_undefined[body] : kNone;
  }

  // Runs `body` in `scope` with an output of its own, which it returns.
  absl::StatusOr<std::string> RenderIn(std::shared_ptr<Scope> scope, const Body& body) {
    std::shared_ptr<Scope> saved_scope = std::exchange(scope_, std::move(scope));
    std::string saved_out = std::exchange(out_, std::string());
    absl::Status status = Exec(body).status();
    scope_ = std::move(saved_scope);
    std::string text = std::exchange(out_, std::move(saved_out));
    RETURN_IF_ERROR(status);
    return text;
  }

  static absl::Status At(int line, const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("chat template line ", line, ": ", status.message()));
  }
  static absl::Status AtUnlessLocated(int line, const absl::Status& status) {
    if (absl::StartsWith(status.message(), "chat template line")) return status;
    return At(line, status);
  }

  absl::StatusOr<Flow> Exec(const Body& body) {
    for (const auto& stmt : body) {
      ASSIGN_OR_RETURN(Flow flow, ExecOne(*stmt));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecOne(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out_ += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kPrint: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        absl::StatusOr<std::string> text = PythonStr(v);
        if (!text.ok()) return At(s.line, text.status());
        out_ += *text;
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          ASSIGN_OR_RETURN(Value cond, Eval(*s.conditions[i]));
          if (cond.Truthy()) return Exec(s.bodies[i]);
        }
        if (s.bodies.size() > s.conditions.size()) return Exec(s.bodies.back());
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return ExecFor(s);
      case Stmt::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        RETURN_IF_ERROR(Assign(s, std::move(v)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        ASSIGN_OR_RETURN(std::string text, RenderIn(NewScope(scope_, StartsUndefined(s, 0)), s.bodies[0]));
        Value v(std::move(text));
        if (s.expr) {
          auto filters = NewScope(scope_, {});
          filters->vars[kBlockValueName] = std::move(v);
          std::shared_ptr<Scope> saved = std::exchange(scope_, std::move(filters));
          absl::StatusOr<Value> filtered = Eval(*s.expr);
          scope_ = std::move(saved);
          if (!filtered.ok()) return filtered.status();
          v = *std::move(filtered);
        }
        RETURN_IF_ERROR(Assign(s, std::move(v)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        scope_->vars[s.macro_name] = Value(std::make_shared<const Macro>(Macro{s.macro_name, &s, scope_}));
        return Flow::kNormal;
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        const std::string& name = call.args[0]->name;
        const Value target = Lookup(name);
        if (!target.is_macro()) {
          std::string what = target.is_undefined()
                                 ? target.undefined_name()
                                 : absl::StrCat("'call' block: '", name, "' is a ", target.TypeName(), ", not a macro");
          return At(s.line, absl::InvalidArgumentError(what));
        }
        std::vector<Value> args;
        KwArgs kwargs;
        RETURN_IF_ERROR(EvalArgs(call, 1, &args, &kwargs));
        const Value caller(std::make_shared<const Macro>(Macro{"caller", &s, scope_}));
        absl::StatusOr<Value> result = CallMacro(target.as_macro(), args, kwargs, &caller);
        if (!result.ok()) return AtUnlessLocated(s.line, result.status());
        out_ += result->as_string();
        return Flow::kNormal;
      }
      case Stmt::Kind::kGeneration: {
        // AssistantTracker's _generation_support: `caller()`, returned as the block's output.
        const Macro body{"caller", &s, scope_};
        absl::StatusOr<Value> result = CallMacro(body, {}, {}, /*caller=*/nullptr);
        if (!result.ok()) return AtUnlessLocated(s.line, result.status());
        out_ += result->as_string();
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  // `set target = v` and the block set's assignment: the innermost scope, or a namespace.
  absl::Status Assign(const Stmt& s, Value v) {
    if (s.targets.size() == 1) {
      scope_->vars[s.targets[0]] = std::move(v);
      return absl::OkStatus();
    }
    const Value ns = Lookup(s.targets[0]);
    if (!ns.is_namespace()) {
      return At(s.line, absl::InvalidArgumentError(absl::StrCat(
                            "cannot assign attribute on non-namespace object '", s.targets[0],
                            "' (a ", ns.TypeName(), ")")));
    }
    ns.as_namespace().attributes[s.targets[1]] = std::move(v);
    return absl::OkStatus();
  }

  // A call of macro `m`, binding arguments as Jinja's Macro.__call__ does: positional
  // arguments first, then keyword arguments for the parameters left, then defaults
  // (evaluated in the macro's scope, so they may read earlier parameters), else Undefined.
  // Extra arguments go to `varargs` / `kwargs` when the body reads those, else are errors.
  // `caller`: a call block's body, or null.
  absl::StatusOr<Value> CallMacro(const Macro& m, const std::vector<Value>& args,
                                  const KwArgs& kwargs, const Value* caller) {
    const Stmt& def = *m.definition;
    std::shared_ptr<Scope> closure = m.closure.lock();
    if (closure == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported call of macro '", m.name, "' after the scope that defined it ended"));
    }
    if (depth_ >= kMaxMacroDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "macro calls nest deeper than ", kMaxMacroDepth, " (calling '", m.name,
          "'): the template recurses too deep, or without end"));
    }
    const size_t n = def.params.size();
    std::vector<std::optional<Value>> bound(n);
    for (size_t i = 0; i < std::min(n, args.size()); ++i) bound[i] = args[i];
    KwArgs rest;
    std::optional<Value> caller_value;
    if (caller != nullptr) caller_value = *caller;
    for (const auto& [k, v] : kwargs) {
      size_t i = args.size();
      while (i < n && def.params[i].name != k) ++i;
      if (i < n) {
        bound[i] = v;
      } else if (k == "caller" && def.reads_caller && !caller_value) {
        caller_value = v;
      } else {
        rest.emplace_back(k, v);
      }
    }
    if (caller_value && !def.reads_caller) rest.emplace_back("caller", *caller_value);
    if (!rest.empty() && !def.reads_kwargs) {
      if (caller != nullptr && !def.reads_caller) {
        return absl::InvalidArgumentError(absl::StrCat(
            "macro '", m.name, "' is called by a call block but never calls caller()"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("macro '", m.name, "' takes no keyword argument '", rest[0].first, "'"));
    }
    if (args.size() > n && !def.reads_varargs) {
      return absl::InvalidArgumentError(
          absl::StrCat("macro '", m.name, "' takes not more than ", n, " argument(s) (", args.size(), " given)"));
    }

    auto scope = NewScope(std::move(closure), StartsUndefined(def, 0));
    if (def.reads_caller) {
      scope->vars["caller"] = caller_value ? *caller_value : Value::MakeUndefined("No caller defined");
    }
    if (def.reads_kwargs) {
      Dict extra;
      for (auto& [k, v] : rest) extra.entries.emplace_back(k, v);
      scope->vars["kwargs"] = Value(std::move(extra));
    }
    if (def.reads_varargs) {
      scope->vars["varargs"] = Value(List(args.begin() + static_cast<std::ptrdiff_t>(std::min(n, args.size())), args.end()));
    }
    std::shared_ptr<Scope> saved = std::exchange(scope_, scope);
    absl::Status bind_status;
    for (size_t i = 0; i < n && bind_status.ok(); ++i) {
      const MacroParam& p = def.params[i];
      if (bound[i]) {
        scope->vars[p.name] = *bound[i];
      } else if (p.default_value) {
        absl::StatusOr<Value> v = Eval(*p.default_value);
        if (v.ok()) scope->vars[p.name] = *std::move(v);
        bind_status = v.status();
      } else {
        scope->vars[p.name] = Value::MakeUndefined(absl::StrCat("parameter '", p.name, "' was not provided"));
      }
    }
    scope_ = std::move(saved);
    RETURN_IF_ERROR(bind_status);
    ++depth_;
    absl::StatusOr<std::string> text = RenderIn(std::move(scope), def.bodies[0]);
    --depth_;
    if (!text.ok()) return text.status();
    return Value(*std::move(text));
  }

  // Binds the loop variable(s) to `item` in `frame` (a pair unpacks into two).
  static absl::Status BindTargets(const Stmt& s, const Value& item, std::map<std::string, Value>& frame) {
    if (s.targets.size() == 1) {
      frame[s.targets[0]] = item;
      return absl::OkStatus();
    }
    if (!item.is_list() || item.as_list().size() != 2) {
      return At(s.line, absl::InvalidArgumentError(absl::StrCat(
                            "cannot unpack a ", item.TypeName(), " into two loop variables")));
    }
    frame[s.targets[0]] = item.as_list()[0];
    frame[s.targets[1]] = item.as_list()[1];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& s) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    absl::StatusOr<std::vector<Value>> items = Iterate(iterable);
    if (!items.ok()) return At(s.line, items.status());
    const std::shared_ptr<Scope> outer = scope_;
    if (!s.conditions.empty()) {
      // The loop filter (`for x in xs if cond`) sees the loop variables, not `loop`; the
      // loop then counts only the items it keeps.
      std::vector<Value> kept;
      for (const Value& item : *items) {
        std::shared_ptr<Scope> scope = NewScope(outer, {});
        RETURN_IF_ERROR(BindTargets(s, item, scope->vars));
        scope_ = std::move(scope);
        absl::StatusOr<Value> keep = Eval(*s.conditions[0]);
        scope_ = outer;
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) kept.push_back(item);
      }
      *items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items->size());
    // One `loop` object for the whole loop, as Jinja's LoopContext.
    auto loop = std::make_shared<LoopContext>();
    loop->items = *items;
    // Jinja clears its else flag at the end of each body run, after the point a `break` or
    // `continue` jumps from: the else body runs unless some iteration ran to the end.
    bool ran_to_end = false;
    for (int64_t i = 0; i < n; ++i) {
      std::shared_ptr<Scope> scope = NewScope(outer, StartsUndefined(s, 0));
      std::map<std::string, Value>& frame = scope->vars;
      const Value& item = (*items)[static_cast<size_t>(i)];
      RETURN_IF_ERROR(BindTargets(s, item, frame));
      loop->index0 = static_cast<size_t>(i);
      frame["loop"] = Value(loop);
      scope_ = std::move(scope);
      absl::StatusOr<Flow> flow = Exec(s.bodies[0]);
      scope_ = outer;
      if (!flow.ok()) return flow.status();
      if (*flow == Flow::kBreak) break;
      if (*flow == Flow::kNormal) ran_to_end = true;
    }
    if (!ran_to_end && s.bodies.size() > 1) {
      // The else body runs in a scope of its own too (Jinja compiles it as an inner frame).
      scope_ = NewScope(outer, StartsUndefined(s, 1));
      absl::StatusOr<Flow> flow = Exec(s.bodies[1]);
      scope_ = outer;
      return flow;
    }
    return Flow::kNormal;
  }

  Value Lookup(const std::string& name) const {
    for (const Scope* s = scope_.get(); s != nullptr; s = s->parent.get()) {
      if (auto found = s->vars.find(name); found != s->vars.end()) return found->second;
    }
    return Value::MakeUndefined(absl::StrCat("'", name, "' is undefined"));
  }

  // Jinja's macros have attributes (name, arguments, ...) and none of them is reproduced.
  static absl::Status RefuseMacroAttribute(const Value& object, const std::string& what) {
    if (!object.is_macro()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported ", what, " of macro '", object.as_macro().name, "'"));
  }

  // `loop.cycle` or `c.next` not called: Python gives a bound method, which is not reproduced
  // (as a value it would print, test and compare unlike anything we have).
  static absl::Status RefuseMethodAsValue(const Value& object, const Value& name) {
    if (!name.is_string()) return absl::OkStatus();
    const std::string& n = name.as_string();
    const bool method = (object.is_loop() && (n == "cycle" || n == "changed")) ||
                        (object.is_cycler() && (n == "next" || n == "reset"));
    if (!method) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("unsupported use of the method '", n, "' of a ", object.TypeName(),
                                                   " without calling it (Python gives a bound method)"));
  }

  absl::StatusOr<Value> EvalDefined(const Expr& e) {
    ASSIGN_OR_RETURN(Value v, Eval(e));
    if (v.is_undefined()) return At(e.line, absl::InvalidArgumentError(v.undefined_name()));
    return v;
  }

  absl::Status EvalArgs(const Expr& e, size_t first, std::vector<Value>* args, KwArgs* kwargs) {
    for (size_t i = first; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      args->push_back(std::move(v));
    }
    for (const auto& [k, expr] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr));
      kwargs->emplace_back(k, std::move(v));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    absl::StatusOr<Value> v = EvalUnlocated(e);
    if (!v.ok()) return AtUnlessLocated(e.line, v.status());
    return v;
  }

  absl::StatusOr<Value> EvalUnlocated(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a));
          items.push_back(std::move(v));
        }
        if (e.kind == Expr::Kind::kTuple) return Value::MakeTuple(std::move(items));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.args[i]));
          ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1]));
          if (!key.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat("unsupported dict key of type ", key.TypeName(), " (only strings)"));
          }
          bool replaced = false;
          for (auto& [k, v] : d.entries) {
            if (k == key.as_string()) {
              v = value;
              replaced = true;
            }
          }
          if (!replaced) d.entries.emplace_back(key.as_string(), std::move(value));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kAttr: {
        ASSIGN_OR_RETURN(Value object, EvalDefined(*e.args[0]));
        RETURN_IF_ERROR(RefuseMacroAttribute(object, absl::StrCat("attribute '.", e.name, "'")));
        RETURN_IF_ERROR(RefuseMethodAsValue(object, Value(e.name)));
        return UnlessBoundMethod(object, Value(e.name), GetAttr(object, e.name), /*attribute_syntax=*/true);
      }
      case Expr::Kind::kItem: {
        ASSIGN_OR_RETURN(Value object, EvalDefined(*e.args[0]));
        RETURN_IF_ERROR(RefuseMacroAttribute(object, "subscript"));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        RETURN_IF_ERROR(RefuseMethodAsValue(object, key));
        return UnlessBoundMethod(object, key, GetItem(object, key), /*attribute_syntax=*/false);
      }
      case Expr::Kind::kSlice: {
        ASSIGN_OR_RETURN(Value object, EvalDefined(*e.args[0]));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[i + 1]) {
            ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1]));
          }
        }
        return GetSlice(object, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        std::vector<Value> args;
        KwArgs kwargs;
        RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::Kind::kName) {
          const Value target = Lookup(callee.name);
          if (target.is_macro()) return CallMacro(target.as_macro(), args, kwargs, /*caller=*/nullptr);
          if (target.is_function() || target.is_joiner()) return CallFunction(target, args, kwargs, clock_);
          // A macro not defined (yet), whose Undefined says so ("'m' is undefined", "No
          // caller defined").
          if (target.is_undefined()) return absl::InvalidArgumentError(target.undefined_name());
          return absl::InvalidArgumentError(absl::StrCat("'", target.TypeName(), "' object is not callable (calling '",
                                                         callee.name, "')"));
        }
        ASSIGN_OR_RETURN(Value object, EvalDefined(*callee.args[0]));
        return CallMethod(object, callee.name, args, kwargs);
      }
      case Expr::Kind::kFilter: {
        ASSIGN_OR_RETURN(Value value, Eval(*e.args[0]));
        std::vector<Value> args;
        KwArgs kwargs;
        RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
        return ApplyFilter(e.name, value, args, kwargs);
      }
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(Value value, Eval(*e.args[0]));
        std::vector<Value> args;
        KwArgs kwargs;
        RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
        ASSIGN_OR_RETURN(bool holds, ApplyTest(e.name, value, args, kwargs));
        return Value(holds != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        ASSIGN_OR_RETURN(Value v, EvalDefined(*e.args[0]));
        if (!v.is_number()) {
          return absl::InvalidArgumentError(
              absl::StrCat("bad operand type for unary ", e.kind == Expr::Kind::kNeg ? "-" : "+",
                           ": '", v.TypeName(), "'"));
        }
        if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value(v.as_int()) : v;
        return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
      }
      case Expr::Kind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        return Value(!v.Truthy());
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
        if (left.Truthy() == (e.kind == Expr::Kind::kOr)) return left;
        return Eval(*e.args[1]);
      }
      case Expr::Kind::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
        return Arithmetic(e.name, a, b);
      }
      case Expr::Kind::kConcat: {
        std::string out;
        for (const auto& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a));
          ASSIGN_OR_RETURN(std::string text, PythonStr(v));
          out += text;
        }
        return Value(std::move(out));
      }
      case Expr::Kind::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
          const std::string& op = e.ops[i];
          bool holds;
          if (op == "==" || op == "!=") {
            holds = Equal(left, right) == (op == "==");
          } else if (op == "in" || op == "notin") {
            ASSIGN_OR_RETURN(bool in, Contains(right, left));
            holds = in == (op == "in");
          } else {
            ASSIGN_OR_RETURN(holds, Order(op, left, right));
          }
          if (!holds) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        ASSIGN_OR_RETURN(Value test, Eval(*e.args[0]));
        if (test.Truthy()) return Eval(*e.args[1]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Value::MakeUndefined("the conditional expression has no else branch");
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  const Template& tmpl_;
  const Clock& clock_;            // strftime_now's
  std::shared_ptr<Scope> scope_;  // the innermost scope
  std::string out_;               // the output of the body running now
  int depth_ = 0;                 // macro calls running now
};

}  // namespace

absl::StatusOr<std::string> RenderTemplate(const Template& tmpl, const nlohmann::ordered_json& variables,
                                           const Clock& clock) {
  return Renderer(tmpl, variables, clock).Run();
}

}  // namespace mlaserve::router::chat_template
