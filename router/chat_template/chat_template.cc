// ChatTemplate: parsing and the tree-walking renderer.
//
// Scoping follows Jinja2: the render variables are the outermost frame, top-level `set`
// writes the template's frame, and every for-loop iteration gets a fresh frame (a `set`
// inside a loop is gone at the next iteration and after the loop; namespaces are how
// templates carry state out of loops). `if` opens no scope.
#include "router/chat_template/chat_template.h"

#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/chat_template/ast.h"
#include "router/chat_template/builtins.h"
#include "router/chat_template/lexer.h"
#include "router/chat_template/parser.h"

namespace mlaserve::router::chat_template {

struct ChatTemplate::Impl {
  Body body;
};

namespace {

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& variables) {
    frames_.emplace_back();
    if (variables.is_object()) {
      for (const auto& [k, v] : variables.items()) frames_.back()[k] = Value::FromJson(v);
    }
    frames_.emplace_back();  // the template's own top-level frame
  }

  absl::StatusOr<std::string> Run(const Body& body) {
    RETURN_IF_ERROR(Exec(body).status());
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  static absl::Status At(int line, const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("chat template line ", line, ": ", status.message()));
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
        absl::StatusOr<std::string> text = ToText(v);
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
        if (s.targets.size() == 1) {
          frames_.back()[s.targets[0]] = std::move(v);
          return Flow::kNormal;
        }
        const Value ns = Lookup(s.targets[0]);
        if (!ns.is_namespace()) {
          return At(s.line, absl::InvalidArgumentError(absl::StrCat(
                                "cannot assign attribute on non-namespace object '", s.targets[0],
                                "' (a ", ns.TypeName(), ")")));
        }
        ns.as_namespace().attributes[s.targets[1]] = std::move(v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& s) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    absl::StatusOr<std::vector<Value>> items = Iterate(iterable);
    if (!items.ok()) return At(s.line, items.status());
    const int64_t n = static_cast<int64_t>(items->size());
    for (int64_t i = 0; i < n; ++i) {
      std::map<std::string, Value> frame;
      const Value& item = (*items)[static_cast<size_t>(i)];
      if (s.targets.size() == 1) {
        frame[s.targets[0]] = item;
      } else {
        if (!item.is_list() || item.as_list().size() != 2) {
          return At(s.line, absl::InvalidArgumentError(absl::StrCat(
                                "cannot unpack a ", item.TypeName(), " into two loop variables")));
        }
        frame[s.targets[0]] = item.as_list()[0];
        frame[s.targets[1]] = item.as_list()[1];
      }
      Dict loop;
      loop.entries = {{"index", Value(i + 1)},
                      {"index0", Value(i)},
                      {"revindex", Value(n - i)},
                      {"revindex0", Value(n - i - 1)},
                      {"first", Value(i == 0)},
                      {"last", Value(i == n - 1)},
                      {"length", Value(n)},
                      {"depth", Value(int64_t{1})},
                      {"depth0", Value(int64_t{0})}};
      if (i > 0) loop.entries.emplace_back("previtem", (*items)[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.entries.emplace_back("nextitem", (*items)[static_cast<size_t>(i + 1)]);
      frame["loop"] = Value(std::move(loop));
      frames_.push_back(std::move(frame));
      absl::StatusOr<Flow> flow = Exec(s.bodies[0]);
      frames_.pop_back();
      if (!flow.ok()) return flow.status();
      if (*flow == Flow::kBreak) break;
    }
    if (n == 0 && s.bodies.size() > 1) return Exec(s.bodies[1]);
    return Flow::kNormal;
  }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (auto found = it->find(name); found != it->end()) return found->second;
    }
    return Value::MakeUndefined(absl::StrCat("'", name, "' is undefined"));
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
    if (!v.ok() && !absl::StartsWith(v.status().message(), "chat template line")) {
      return At(e.line, v.status());
    }
    return v;
  }

  absl::StatusOr<Value> EvalUnlocated(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        List items;
        for (const auto& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a));
          items.push_back(std::move(v));
        }
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
        return GetAttr(object, e.name);
      }
      case Expr::Kind::kItem: {
        ASSIGN_OR_RETURN(Value object, EvalDefined(*e.args[0]));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        return GetItem(object, key);
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
          const Value shadow = Lookup(callee.name);
          if (!shadow.is_undefined()) {
            return absl::InvalidArgumentError(
                absl::StrCat("unsupported call of the variable '", callee.name, "'"));
          }
          return CallFunction(callee.name, args, kwargs);
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
        return Value(ApplyTest(e.name, value) != e.negated);
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
          ASSIGN_OR_RETURN(std::string text, ToText(v));
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

  std::vector<std::map<std::string, Value>> frames_;
  std::string out_;
};

bool ExprReads(const Expr* e, std::string_view name) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kName && e->name == name) return true;
  for (const ExprPtr& arg : e->args) {
    if (ExprReads(arg.get(), name)) return true;
  }
  for (const auto& [key, arg] : e->kwargs) {
    if (ExprReads(arg.get(), name)) return true;
  }
  return false;
}

bool BodyReads(const Body& body, std::string_view name) {
  for (const auto& stmt : body) {
    if (ExprReads(stmt->expr.get(), name)) return true;
    for (const ExprPtr& c : stmt->conditions) {
      if (ExprReads(c.get(), name)) return true;
    }
    for (const Body& b : stmt->bodies) {
      if (BodyReads(b, name)) return true;
    }
  }
  return false;
}

}  // namespace

bool ChatTemplate::ReadsVariable(std::string_view name) const { return BodyReads(impl_->body, name); }

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(impl->body, chat_template::Parse(tokens));
  return ChatTemplate(std::move(impl));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& variables) const {
  return Renderer(variables).Run(impl_->body);
}

}  // namespace mlaserve::router::chat_template
