#include "router/chat_template/scope_analysis.h"

#include <optional>
#include <set>
#include <string_view>

namespace mlaserve::router::chat_template {
namespace {

// ---- Implicit macro parameters (Jinja's find_undeclared) ----

// Whether the first mention of `name`, in the order Jinja's node fields list them, reads it
// (true) or assigns / declares it (false); nullopt when there is none.
std::optional<bool> FirstMention(const Expr* e, std::string_view name) {
  if (e == nullptr) return std::nullopt;
  if (e->kind == Expr::Kind::kName && e->name == name) return true;
  for (const ExprPtr& arg : e->args) {
    if (std::optional<bool> r = FirstMention(arg.get(), name)) return r;
  }
  for (const auto& [key, arg] : e->kwargs) {
    if (std::optional<bool> r = FirstMention(arg.get(), name)) return r;
  }
  return std::nullopt;
}

std::optional<bool> FirstMention(const Body& body, std::string_view name);

std::optional<bool> FirstMention(const std::vector<MacroParam>& params, const Body& body,
                                 std::string_view name) {
  for (const MacroParam& p : params) {
    if (p.name == name) return false;
  }
  for (const MacroParam& p : params) {
    if (std::optional<bool> r = FirstMention(p.default_value.get(), name)) return r;
  }
  return FirstMention(body, name);
}

std::optional<bool> FirstMention(const Stmt& s, std::string_view name) {
  const auto assigns = [&] { return s.targets.size() == 1 && s.targets[0] == name; };
  switch (s.kind) {
    case Stmt::Kind::kText:
    case Stmt::Kind::kBreak:
    case Stmt::Kind::kContinue:
      return std::nullopt;
    case Stmt::Kind::kPrint:
      return FirstMention(s.expr.get(), name);
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.bodies.size(); ++i) {
        if (i < s.conditions.size()) {
          if (std::optional<bool> r = FirstMention(s.conditions[i].get(), name)) return r;
        }
        if (std::optional<bool> r = FirstMention(s.bodies[i], name)) return r;
      }
      return std::nullopt;
    case Stmt::Kind::kFor: {
      for (const std::string& t : s.targets) {
        if (t == name) return false;
      }
      if (std::optional<bool> r = FirstMention(s.expr.get(), name)) return r;
      for (const Body& b : s.bodies) {
        if (std::optional<bool> r = FirstMention(b, name)) return r;
      }
      for (const ExprPtr& c : s.conditions) {  // the loop filter, after the bodies in Jinja's For node
        if (std::optional<bool> r = FirstMention(c.get(), name)) return r;
      }
      return std::nullopt;
    }
    case Stmt::Kind::kSet:
      if (assigns()) return false;  // Jinja's Assign lists its target before its value
      return FirstMention(s.expr.get(), name);
    case Stmt::Kind::kSetBlock:
      if (assigns()) return false;
      if (std::optional<bool> r = FirstMention(s.expr.get(), name)) return r;
      return FirstMention(s.bodies[0], name);
    case Stmt::Kind::kMacro:
      return FirstMention(s.params, s.bodies[0], name);
    case Stmt::Kind::kCallBlock:
    case Stmt::Kind::kGeneration:
      if (std::optional<bool> r = FirstMention(s.expr.get(), name)) return r;
      return FirstMention(s.params, s.bodies[0], name);
  }
  return std::nullopt;
}

std::optional<bool> FirstMention(const Body& body, std::string_view name) {
  for (const auto& s : body) {
    if (std::optional<bool> r = FirstMention(*s, name)) return r;
  }
  return std::nullopt;
}

// ---- Names a scope starts as undefined (Jinja's FrameSymbolVisitor and Symbols) ----

// The names one scope's own statements mention, in Jinja's visiting order.
class ScopeNames {
 public:
  // A name declared before the statements run (a parameter, a loop variable).
  void Declare(const std::string& name) { mentioned_.insert(name); }

  void Read(const Expr* e) {
    if (e == nullptr) return;
    if (e->kind == Expr::Kind::kName) Mention(e->name, /*unconditional_assignment=*/false);
    for (const ExprPtr& arg : e->args) Read(arg.get());
    for (const auto& [key, arg] : e->kwargs) Read(arg.get());
  }

  void Statements(const Body& body, bool in_branch) {
    for (const auto& s : body) {
      switch (s->kind) {
        case Stmt::Kind::kPrint:
        case Stmt::Kind::kFor:  // the iterable is read here; the body is a scope of its own
        case Stmt::Kind::kCallBlock:
          Read(s->expr.get());
          break;
        case Stmt::Kind::kIf:
          // The first test always runs; elif tests and the branches only maybe. (Their
          // order among themselves does not matter: nothing in a branch is unconditional.)
          for (const ExprPtr& c : s->conditions) Read(c.get());
          for (const Body& b : s->bodies) Statements(b, /*in_branch=*/true);
          break;
        case Stmt::Kind::kSet:
          Read(s->expr.get());  // Jinja visits an assignment's value before its target
          [[fallthrough]];
        case Stmt::Kind::kSetBlock:
          // `set ns.attr` reads ns.
          Mention(s->targets[0], s->targets.size() == 1 && !in_branch);
          break;
        case Stmt::Kind::kMacro:
          Mention(s->macro_name, !in_branch);
          break;
        case Stmt::Kind::kText:
        case Stmt::Kind::kBreak:
        case Stmt::Kind::kContinue:
        case Stmt::Kind::kGeneration:  // a scope of its own that reads nothing here
          break;
      }
    }
  }

  const std::set<std::string>& mentioned() const { return mentioned_; }
  const std::vector<std::string>& first_assigned() const { return first_assigned_; }

 private:
  void Mention(const std::string& name, bool unconditional_assignment) {
    if (mentioned_.insert(name).second && unconditional_assignment) first_assigned_.push_back(name);
  }

  std::set<std::string> mentioned_;
  std::vector<std::string> first_assigned_;  // names first mentioned by an unconditional assignment
};

void AnalyzeNested(Body& body, const std::set<std::string>& outer);

// One scope: its statements `body`, run after `declared` names are set and `reads` are
// evaluated (a macro's defaults), inside scopes that mention `outer`.
std::vector<std::string> AnalyzeScope(Body& body, const std::vector<std::string>& declared,
                                      const std::vector<const Expr*>& reads,
                                      const std::set<std::string>& outer) {
  ScopeNames names;
  for (const std::string& d : declared) names.Declare(d);
  for (const Expr* e : reads) names.Read(e);
  names.Statements(body, /*in_branch=*/false);
  std::vector<std::string> starts_undefined;
  for (const std::string& name : names.first_assigned()) {
    if (outer.count(name) == 0) starts_undefined.push_back(name);
  }
  std::set<std::string> inner_outer = outer;
  inner_outer.insert(names.mentioned().begin(), names.mentioned().end());
  AnalyzeNested(body, inner_outer);
  return starts_undefined;
}

// The scopes the statements of `body` open (descending into if branches, which open none).
void AnalyzeNested(Body& body, const std::set<std::string>& outer) {
  for (auto& s : body) {
    switch (s->kind) {
      case Stmt::Kind::kIf:
        for (Body& b : s->bodies) AnalyzeNested(b, outer);
        break;
      case Stmt::Kind::kFor: {
        std::vector<std::string> declared = s->targets;
        declared.push_back("loop");
        s->starts_undefined.clear();
        std::vector<const Expr*> filter;  // the loop filter reads names in the loop's scope
        for (const ExprPtr& c : s->conditions) filter.push_back(c.get());
        s->starts_undefined.push_back(AnalyzeScope(s->bodies[0], declared, filter, outer));
        if (s->bodies.size() > 1) s->starts_undefined.push_back(AnalyzeScope(s->bodies[1], {}, {}, outer));
        break;
      }
      case Stmt::Kind::kSetBlock:
        s->starts_undefined = {AnalyzeScope(s->bodies[0], {}, {}, outer)};
        break;
      case Stmt::Kind::kMacro:
      case Stmt::Kind::kCallBlock:
      case Stmt::Kind::kGeneration: {
        s->reads_varargs = FirstMention(s->bodies[0], "varargs") == true;
        s->reads_kwargs = FirstMention(s->bodies[0], "kwargs") == true;
        s->reads_caller = FirstMention(s->bodies[0], "caller") == true;
        std::vector<std::string> declared;
        std::vector<const Expr*> defaults;
        for (const MacroParam& p : s->params) {
          declared.push_back(p.name);
          if (p.default_value) defaults.push_back(p.default_value.get());
        }
        if (s->reads_varargs) declared.push_back("varargs");
        if (s->reads_kwargs) declared.push_back("kwargs");
        if (s->reads_caller) declared.push_back("caller");
        s->starts_undefined = {AnalyzeScope(s->bodies[0], declared, defaults, outer)};
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace

std::vector<std::string> AnalyzeScopes(Body& body) { return AnalyzeScope(body, {}, {}, {}); }

}  // namespace mlaserve::router::chat_template
