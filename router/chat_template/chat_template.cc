// ChatTemplate: lexing, parsing and the scope analysis at load time; rendering is
// renderer.h's.
#include "router/chat_template/chat_template.h"

#include <vector>

#include "common/status.h"
#include "router/chat_template/ast.h"
#include "router/chat_template/lexer.h"
#include "router/chat_template/parser.h"
#include "router/chat_template/renderer.h"
#include "router/chat_template/scope_analysis.h"

namespace mlaserve::router::chat_template {

struct ChatTemplate::Impl {
  Template tmpl;
};

namespace {

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
    for (const MacroParam& p : stmt->params) {
      if (ExprReads(p.default_value.get(), name)) return true;
    }
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

bool ChatTemplate::ReadsVariable(std::string_view name) const { return BodyReads(impl_->tmpl.body, name); }

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(impl->tmpl.body, chat_template::Parse(tokens));
  impl->tmpl.starts_undefined = AnalyzeScopes(impl->tmpl.body);
  return ChatTemplate(std::move(impl));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& variables) const {
  static const Clock kSystemClock = SystemLocalTime;
  return RenderTemplate(impl_->tmpl, variables, kSystemClock);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& variables, const Clock& clock) const {
  return RenderTemplate(impl_->tmpl, variables, clock);
}

}  // namespace mlaserve::router::chat_template
