#include "router/chat_template/parser.h"

#include <charconv>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "router/chat_template/builtins.h"

namespace mlaserve::router::chat_template {
namespace {

std::unique_ptr<Stmt> NewStmt(Stmt::Kind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string stop;
    RETURN_IF_ERROR(ParseBody({}, &body, &stop));
    // A call of a name must reach a builtin function or a macro of this template: checked
    // here, once every macro is known, so that a template calling something we cannot
    // render fails when loaded. (Whether the macro is defined by the time of the call is
    // the renderer's question, as it is Jinja's.)
    for (const NameCall& call : name_calls_) {
      // A macro, or a variable the template sets (a joiner() object, say): whether it is
      // callable when called is the renderer's question.
      if (macro_names_.count(call.name) > 0 || set_names_.count(call.name) > 0) continue;
      if (call.name == "caller") {
        if (call.in_macro) continue;
        return ErrorAt(call.line, "'caller()' outside a macro or call block");
      }
      return ErrorAt(call.line, absl::StrCat(
                                    "unsupported function '", call.name,
                                    "' (not in the Jinja subset mlaserve renders: the template defines no "
                                    "macro of that name, and the functions are range(), dict(), namespace(), "
                                    "cycler(), joiner(), raise_exception() and strftime_now())"));
    }
    return body;
  }

 private:
  const Token& Cur() const { return t_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return t_[std::min(pos_ + ahead, t_.size() - 1)];
  }
  bool IsOp(std::string_view op) const {
    return Cur().kind == TokenKind::kOperator && Cur().text == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }
  absl::Status Error(const std::string& what) const { return ErrorAt(Cur().line, what); }
  static absl::Status ErrorAt(int line, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
  }
  absl::Status Unsupported(const std::string& what) const {
    return Error(absl::StrCat("unsupported ", what, " (not in the Jinja subset mlaserve renders)"));
  }
  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kEnd: return "the end of the template";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kPrintEnd: return "'}}'";
      case TokenKind::kString: return "a string";
      default: return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(TokenKind kind, std::string_view text) {
    if (Cur().kind != kind || (!text.empty() && Cur().text != text)) {
      return Error(absl::StrCat("expected '", std::string(text), "', found ", Describe(Cur())));
    }
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() { return Expect(TokenKind::kBlockEnd, "%}"); }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) {
      return Error(absl::StrCat("expected a name, found ", Describe(Cur())));
    }
    return t_[pos_++].text;
  }

  // Parses statements until a block tag whose keyword is in `stops` (left in *stop, the tag
  // consumed up to its keyword) or the end of the template (stop empty).
  absl::Status ParseBody(const std::set<std::string_view>& stops, Body* body, std::string* stop) {
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kEnd) {
        if (!stops.empty()) {
          return Error(absl::StrCat("the template ends inside a block that needs one of '",
                                    absl::StrJoin(std::vector<std::string>(stops.begin(), stops.end()), "', '"), "'"));
        }
        stop->clear();
        return absl::OkStatus();
      }
      if (t.kind == TokenKind::kData) {
        auto s = NewStmt(Stmt::Kind::kText, t.line);
        s->text = t.text;
        body->push_back(std::move(s));
        ++pos_;
        continue;
      }
      if (t.kind == TokenKind::kPrintBegin) {
        ++pos_;
        auto s = NewStmt(Stmt::Kind::kPrint, t.line);
        ASSIGN_OR_RETURN(s->expr, ParseExpression());
        RETURN_IF_ERROR(Expect(TokenKind::kPrintEnd, "}}"));
        body->push_back(std::move(s));
        continue;
      }
      // A block tag.
      ++pos_;
      ASSIGN_OR_RETURN(std::string keyword, ExpectName());
      if (stops.count(keyword) > 0) {
        *stop = keyword;
        return absl::OkStatus();
      }
      std::unique_ptr<Stmt> s;
      if (keyword == "if") {
        ASSIGN_OR_RETURN(s, ParseIf(t.line));
      } else if (keyword == "for") {
        ASSIGN_OR_RETURN(s, ParseFor(t.line));
      } else if (keyword == "set") {
        ASSIGN_OR_RETURN(s, ParseSet(t.line));
      } else if (keyword == "macro") {
        ASSIGN_OR_RETURN(s, ParseMacro(t.line));
      } else if (keyword == "call") {
        ASSIGN_OR_RETURN(s, ParseCallBlock(t.line));
      } else if (keyword == "generation") {
        ASSIGN_OR_RETURN(s, ParseGeneration(t.line));
      } else if (keyword == "break" || keyword == "continue") {
        if (loop_depth_ == 0) return Error(absl::StrCat("'", keyword, "' outside a for loop"));
        s = NewStmt(keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, t.line);
        RETURN_IF_ERROR(ExpectBlockEnd());
      } else if (keyword == "elif" || keyword == "else" || keyword.starts_with("end")) {
        return Error(absl::StrCat("unexpected '", keyword, "'"));
      } else {
        return Unsupported(absl::StrCat("statement '", keyword, "'"));
      }
      body->push_back(std::move(s));
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(int line) {
    auto s = NewStmt(Stmt::Kind::kIf, line);
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->conditions.push_back(std::move(cond));
      s->bodies.emplace_back();
      std::string stop;
      RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &s->bodies.back(), &stop));
      if (stop == "elif") continue;
      if (stop == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        s->bodies.emplace_back();
        RETURN_IF_ERROR(ParseBody({"endif"}, &s->bodies.back(), &stop));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(int line) {
    auto s = NewStmt(Stmt::Kind::kFor, line);
    ASSIGN_OR_RETURN(std::string first, ExpectName());
    s->targets.push_back(first);
    if (IsOp(",")) {
      ++pos_;
      ASSIGN_OR_RETURN(std::string second, ExpectName());
      s->targets.push_back(second);
      if (IsOp(",")) return Unsupported("for loop with more than two targets");
    }
    if (!IsName("in")) return Error(absl::StrCat("expected 'in', found ", Describe(Cur())));
    ++pos_;
    ASSIGN_OR_RETURN(s->expr, ParseOr());  // Jinja parses the iterable without a condexpr
    if (IsName("if")) {
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr filter, ParseExpression());
      s->conditions.push_back(std::move(filter));
    }
    if (IsName("recursive")) return Unsupported("recursive for loop");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    s->bodies.emplace_back();
    std::string stop;
    RETURN_IF_ERROR(ParseBody({"else", "endfor"}, &s->bodies.back(), &stop));
    --loop_depth_;
    if (stop == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endfor"}, &s->bodies.back(), &stop));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(int line) {
    auto s = NewStmt(Stmt::Kind::kSet, line);
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    s->targets.push_back(name);
    if (IsOp(".")) {
      ++pos_;
      ASSIGN_OR_RETURN(std::string attr, ExpectName());
      s->targets.push_back(attr);
    }
    if (IsOp(",")) return Unsupported("tuple assignment in 'set'");
    if (s->targets.size() == 1) set_names_.insert(name);
    if (Cur().kind == TokenKind::kBlockEnd || IsOp("|")) {
      // {% set x [| filters] %}body{% endset %}: the filters see the rendered body.
      s->kind = Stmt::Kind::kSetBlock;
      if (IsOp("|")) {
        ExprPtr node = Node(Expr::Kind::kName, Cur().line);
        node->name = kBlockValueName;
        while (IsOp("|")) {
          ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
        }
        s->expr = std::move(node);
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      RETURN_IF_ERROR(ParseScopedBody(s.get(), "endset", /*is_macro=*/false));
      return s;
    }
    RETURN_IF_ERROR(Expect(TokenKind::kOperator, "="));
    ASSIGN_OR_RETURN(s->expr, ParseExpression());
    if (IsOp(",")) {
      // `set x = a, b`: a tuple, as Jinja's parse_tuple reads it.
      ExprPtr tuple = Node(Expr::Kind::kTuple, s->expr->line);
      tuple->args.push_back(std::move(s->expr));
      while (IsOp(",")) {
        ++pos_;
        if (Cur().kind == TokenKind::kBlockEnd) break;
        ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
        tuple->args.push_back(std::move(item));
      }
      s->expr = std::move(tuple);
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // {% macro name(a, b=default) %}body{% endmacro %}
  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(int line) {
    auto s = NewStmt(Stmt::Kind::kMacro, line);
    ASSIGN_OR_RETURN(s->macro_name, ExpectName());
    RETURN_IF_ERROR(ParseSignature(s.get()));
    RETURN_IF_ERROR(ExpectBlockEnd());
    macro_names_.insert(s->macro_name);
    RETURN_IF_ERROR(ParseScopedBody(s.get(), "endmacro", /*is_macro=*/true));
    return s;
  }

  // {% call(params) macro(args) %}body{% endcall %}: the body is the macro's `caller`.
  absl::StatusOr<std::unique_ptr<Stmt>> ParseCallBlock(int line) {
    auto s = NewStmt(Stmt::Kind::kCallBlock, line);
    s->macro_name = "caller";
    if (IsOp("(")) RETURN_IF_ERROR(ParseSignature(s.get()));
    ASSIGN_OR_RETURN(s->expr, ParseExpression());
    if (s->expr->kind != Expr::Kind::kCall || s->expr->args[0]->kind != Expr::Kind::kName) {
      return ErrorAt(line, "'call' needs a macro call, as in {% call name(args) %}");
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    RETURN_IF_ERROR(ParseScopedBody(s.get(), "endcall", /*is_macro=*/true));
    return s;
  }

  // transformers' {% generation %}body{% endgeneration %}: its AssistantTracker parses the
  // body as a call block's (a macro called `caller`, a scope of its own) and renders it in
  // place; where the body lies in the output (the assistant mask) is not asked of us.
  absl::StatusOr<std::unique_ptr<Stmt>> ParseGeneration(int line) {
    auto s = NewStmt(Stmt::Kind::kGeneration, line);
    s->macro_name = "caller";
    if (IsOp(":")) ++pos_;  // Jinja's parse_statements skips a colon before the block end
    RETURN_IF_ERROR(ExpectBlockEnd());
    RETURN_IF_ERROR(ParseScopedBody(s.get(), "endgeneration", /*is_macro=*/true));
    return s;
  }

  // `(a, b=default, ...)`, as Jinja's parse_signature reads it (no trailing comma).
  absl::Status ParseSignature(Stmt* s) {
    RETURN_IF_ERROR(Expect(TokenKind::kOperator, "("));
    while (!IsOp(")")) {
      if (!s->params.empty()) RETURN_IF_ERROR(Expect(TokenKind::kOperator, ","));
      MacroParam param;
      ASSIGN_OR_RETURN(param.name, ExpectName());
      if (param.name == "varargs" || param.name == "kwargs" || param.name == "caller") {
        return Unsupported(absl::StrCat("macro parameter named '", param.name,
                                        "' (Jinja's implicit parameter of that name)"));
      }
      for (const MacroParam& p : s->params) {
        if (p.name == param.name) return Error(absl::StrCat("duplicate parameter '", param.name, "'"));
      }
      if (IsOp("=")) {
        ++pos_;
        ASSIGN_OR_RETURN(param.default_value, ParseExpression());
      } else if (!s->params.empty() && s->params.back().default_value) {
        return Error(absl::StrCat("parameter '", param.name, "' without a default follows one with a default"));
      }
      s->params.push_back(std::move(param));
    }
    ++pos_;
    return absl::OkStatus();
  }

  // The body of a macro, call block or block set, up to `end`: a scope of its own, which
  // break / continue cannot leave.
  absl::Status ParseScopedBody(Stmt* s, std::string_view end, bool is_macro) {
    const int loop_depth = loop_depth_;
    loop_depth_ = 0;
    macro_depth_ += is_macro ? 1 : 0;
    s->bodies.emplace_back();
    std::string stop;
    absl::Status st = ParseBody({end}, &s->bodies.back(), &stop);
    loop_depth_ = loop_depth;
    macro_depth_ -= is_macro ? 1 : 0;
    RETURN_IF_ERROR(st);
    return ExpectBlockEnd();
  }

  ExprPtr Node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      ExprPtr cond = Node(Expr::Kind::kCond, Cur().line);
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++pos_;
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseBinaryChain(Expr::Kind kind, std::string_view keyword,
                                           absl::StatusOr<ExprPtr> (Parser::*next)()) {
    ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (IsName(keyword)) {
      ExprPtr node = Node(kind, Cur().line);
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      node->args.push_back(std::move(left));
      node->args.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }
  absl::StatusOr<ExprPtr> ParseOr() { return ParseBinaryChain(Expr::Kind::kOr, "or", &Parser::ParseAnd); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseBinaryChain(Expr::Kind::kAnd, "and", &Parser::ParseNot); }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      ExprPtr node = Node(Expr::Kind::kNot, Cur().line);
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      node->args.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (Cur().kind == TokenKind::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        ++pos_;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        op = "notin";
        pos_ += 2;
      } else {
        break;
      }
      if (!node) {
        node = Node(Expr::Kind::kCompare, line);
        node->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr next, ParseMath1());
      node->ops.push_back(op);
      node->args.push_back(std::move(next));
    }
    return node ? std::move(node) : std::move(first);
  }

  absl::StatusOr<ExprPtr> ParseArith(std::initializer_list<std::string_view> ops,
                                     absl::StatusOr<ExprPtr> (Parser::*next)()) {
    ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (Cur().kind == TokenKind::kOperator &&
           std::find(ops.begin(), ops.end(), Cur().text) != ops.end()) {
      ExprPtr node = Node(Expr::Kind::kBinary, Cur().line);
      node->name = Cur().text;
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      node->args.push_back(std::move(left));
      node->args.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }
  absl::StatusOr<ExprPtr> ParseMath1() { return ParseArith({"+", "-"}, &Parser::ParseConcat); }
  absl::StatusOr<ExprPtr> ParseMath2() { return ParseArith({"*", "/", "//", "%"}, &Parser::ParsePow); }
  absl::StatusOr<ExprPtr> ParsePow() { return ParseArith({"**"}, &Parser::ParseUnaryWithFilters); }

  absl::StatusOr<ExprPtr> ParseConcat() {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    ExprPtr node = Node(Expr::Kind::kConcat, line);
    node->args.push_back(std::move(first));
    while (IsOp("~")) {
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
      node->args.push_back(std::move(next));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Node(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().line);
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    switch (t.kind) {
      case TokenKind::kName: {
        ++pos_;
        if (t.text == "true" || t.text == "True") return Literal(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return Literal(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return Literal(Value::MakeNone(), t.line);
        ExprPtr n = Node(Expr::Kind::kName, t.line);
        n->name = t.text;
        return n;
      }
      case TokenKind::kString: {
        std::string s;
        while (Cur().kind == TokenKind::kString) s += t_[pos_++].text;  // adjacent literals join
        return Literal(Value(std::move(s)), t.line);
      }
      case TokenKind::kInteger: {
        ++pos_;
        int64_t v = 0;
        auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc()) return Error(absl::StrCat("integer literal ", t.text, " is out of range"));
        return Literal(Value(v), t.line);
      }
      case TokenKind::kFloat: {
        ++pos_;
        double v = 0;
        std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        return Literal(Value(v), t.line);
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          ++pos_;
          ExprPtr tuple = Node(Expr::Kind::kTuple, t.line);
          if (IsOp(")")) {
            ++pos_;
            return tuple;  // ()
          }
          ASSIGN_OR_RETURN(ExprPtr inner, ParseExpression());
          if (!IsOp(",")) {
            RETURN_IF_ERROR(Expect(TokenKind::kOperator, ")"));
            return inner;
          }
          // (a,) and (a, b, ...): a tuple.
          tuple->args.push_back(std::move(inner));
          while (IsOp(",")) {
            ++pos_;
            if (IsOp(")")) break;
            ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
            tuple->args.push_back(std::move(item));
          }
          RETURN_IF_ERROR(Expect(TokenKind::kOperator, ")"));
          return tuple;
        }
        if (t.text == "[") return ParseSequence(Expr::Kind::kList, "]");
        if (t.text == "{") return ParseSequence(Expr::Kind::kDict, "}");
        break;
      default:
        break;
    }
    return Error(absl::StrCat("unexpected ", Describe(t), " in an expression"));
  }

  ExprPtr Literal(Value v, int line) {
    ExprPtr e = Node(Expr::Kind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  absl::StatusOr<ExprPtr> ParseSequence(Expr::Kind kind, std::string_view close) {
    ExprPtr node = Node(kind, Cur().line);
    ++pos_;
    while (!IsOp(close)) {
      if (!node->args.empty()) RETURN_IF_ERROR(Expect(TokenKind::kOperator, ","));
      if (IsOp(close)) break;  // trailing comma
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      node->args.push_back(std::move(item));
      if (kind == Expr::Kind::kDict) {
        RETURN_IF_ERROR(Expect(TokenKind::kOperator, ":"));
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node->args.push_back(std::move(value));
      }
    }
    ++pos_;
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        ++pos_;
        ExprPtr attr = Node(Expr::Kind::kAttr, Cur().line);
        if (Cur().kind == TokenKind::kInteger) {
          attr->kind = Expr::Kind::kItem;
          attr->args.push_back(std::move(node));
          ASSIGN_OR_RETURN(ExprPtr index, ParsePrimary());
          attr->args.push_back(std::move(index));
        } else {
          ASSIGN_OR_RETURN(attr->name, ExpectName());
          attr->args.push_back(std::move(node));
        }
        node = std::move(attr);
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target) {
    const int line = Cur().line;
    ++pos_;  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++colons > 2) return Error("a slice has at most two ':'");
        ++pos_;
        continue;
      }
      if (parts[colons]) return Unsupported("tuple subscript");
      ASSIGN_OR_RETURN(parts[colons], ParseExpression());
      if (IsOp(",")) return Unsupported("tuple subscript");
    }
    ++pos_;
    ExprPtr node = Node(colons == 0 ? Expr::Kind::kItem : Expr::Kind::kSlice, line);
    node->args.push_back(std::move(target));
    if (colons == 0) {
      if (!parts[0]) return Error("empty subscript '[]'");
      node->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) node->args.push_back(std::move(p));
    }
    return node;
  }

  absl::Status ParseArgs(Expr* node) {
    ++pos_;  // (
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return Unsupported("*args / **kwargs in a call");
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator && Peek().text == "=") {
        std::string key = Cur().text;
        for (const auto& [k, v] : node->kwargs) {
          if (k == key) return Error(absl::StrCat("keyword argument '", key, "' repeated"));
        }
        pos_ += 2;
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node->kwargs.empty()) return Error("a positional argument follows a keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        node->args.push_back(std::move(value));
      }
      if (IsOp(",")) {
        ++pos_;
      } else if (!IsOp(")")) {
        return Error(absl::StrCat("expected ',' or ')', found ", Describe(Cur())));
      }
    }
    ++pos_;
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr node = Node(Expr::Kind::kCall, Cur().line);
    if (callee->kind == Expr::Kind::kName) {
      if (!IsBuiltinFunction(callee->name)) {
        name_calls_.push_back(NameCall{callee->name, Cur().line, macro_depth_ > 0});
      }
    } else if (callee->kind == Expr::Kind::kAttr) {
      if (!IsKnownMethod(callee->name)) {
        return Unsupported(absl::StrCat("method '.", callee->name, "()'"));
      }
    } else {
      return Unsupported("call of a computed value");
    }
    node->args.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseArgs(node.get()));
    return node;
  }

  // `| name` or `| name(args)` applied to `node`.
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node) {
    ++pos_;  // |
    ExprPtr f = Node(Expr::Kind::kFilter, Cur().line);
    ASSIGN_OR_RETURN(f->name, ExpectName());
    if (IsOp(".")) return Unsupported("dotted filter name");
    if (!IsKnownFilter(f->name)) {
      return Unsupported(absl::StrCat("filter '", f->name, "'"));
    }
    f->args.push_back(std::move(node));
    if (IsOp("(")) RETURN_IF_ERROR(ParseArgs(f.get()));
    return f;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        ++pos_;
        ExprPtr test = Node(Expr::Kind::kTest, Cur().line);
        if (IsName("not")) {
          test->negated = true;
          ++pos_;
        }
        ASSIGN_OR_RETURN(test->name, ExpectName());
        if (!IsKnownTest(test->name)) {
          return Unsupported(absl::StrCat("test 'is ", test->name, "'"));
        }
        test->args.push_back(std::move(node));
        // Jinja's parse_test: `is name(args)`, or one argument written after the name
        // (`is divisibleby 3`, `is sameas none`): a primary with its postfix.
        const TokenKind k = Cur().kind;
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseArgs(test.get()));
        } else if (k == TokenKind::kString || k == TokenKind::kInteger || k == TokenKind::kFloat || IsOp("[") ||
                   IsOp("{") || (k == TokenKind::kName && !IsName("else") && !IsName("or") && !IsName("and"))) {
          if (IsName("is")) return Error("You cannot chain multiple tests with is");
          if (IsName("if") || IsName("in") || IsName("not")) {
            // Jinja would read the keyword as a variable name: refused rather than guessed.
            return Unsupported(absl::StrCat("'", Cur().text, "' after the test 'is ", test->name, "'"));
          }
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          test->args.push_back(std::move(arg));
        }
        node = std::move(test);
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // A call `name(...)` of something other than a builtin function.
  struct NameCall {
    std::string name;
    int line;
    bool in_macro;
  };

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int loop_depth_ = 0;   // for loops around the current statement, inside its macro
  int macro_depth_ = 0;  // macro and call-block bodies around the current statement
  std::set<std::string> macro_names_;
  std::set<std::string> set_names_;  // names a `set` assigns
  std::vector<NameCall> name_calls_;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) { return Parser(tokens).Run(); }

}  // namespace mlaserve::router::chat_template
