#include "router/chat_template/lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {
namespace {

absl::Status LexError(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

// Length of the Python whitespace character at `pos` (0 if none). Jinja's `\s` and
// str.rstrip() both use Python's notion of whitespace.
size_t SpaceAt(std::string_view s, size_t pos) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return IsPythonSpace(c) ? 1 : 0;
  std::vector<std::string_view> cp = CodePoints(s.substr(pos, 4));
  if (cp.empty()) return 0;
  const std::string_view stripped = StripPythonSpace(cp[0], true, false);
  return stripped.empty() ? cp[0].size() : 0;
}

size_t SkipSpace(std::string_view s, size_t pos, int* line) {
  while (pos < s.size()) {
    const size_t n = SpaceAt(s, pos);
    if (n == 0) break;
    if (s[pos] == '\n') ++*line;
    pos += n;
  }
  return pos;
}

// Python's unicode-escape decoding, as Jinja applies it to string literals.
absl::StatusOr<std::string> DecodeEscapes(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    const auto hex = [&](size_t digits) -> absl::StatusOr<char32_t> {
      char32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) {
          return LexError(line, "truncated \\x, \\u or \\U escape in a string literal");
        }
        const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(body[i + k])));
        v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
      }
      i += digits;
      return v;
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': case 'u': case 'U': {
        absl::StatusOr<char32_t> c = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
        if (!c.ok()) return c.status();
        if (*c > 0x10FFFF || (*c >= 0xD800 && *c <= 0xDFFF)) {
          return LexError(line, "a \\u or \\U escape names a surrogate or no character");
        }
        model::utf8::Append(*c, &out);
        break;
      }
      case 'N': return LexError(line, "unsupported \\N{...} escape in a string literal");
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          model::utf8::Append(v, &out);
        } else {
          out.push_back('\\');  // Python keeps unknown escapes as they are
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t tag = s_.find('{', pos) == std::string::npos ? std::string::npos : NextTag(pos);
      if (tag == std::string::npos) {
        Push(TokenKind::kData, s_.substr(pos));
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      std::string text = s_.substr(pos, tag - pos);
      const int text_lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      if (sign == '-') {
        text = std::string(StripPythonSpace(text, false, true));
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only spaces/tabs between the line's start and the tag.
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos) {
          text.resize(l_pos);
        }
      }
      Push(TokenKind::kData, std::move(text));
      line_ += text_lines;
      pos = tag + 2 + (sign != 0 ? 1 : 0);
      absl::StatusOr<size_t> end = kind == '#' ? SkipComment(pos) : LexTag(pos, kind == '%');
      if (!end.ok()) return end.status();
      line_starting = *end > 0 && s_[*end - 1] == '\n';
      pos = *end;
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t NextTag(size_t pos) const {
    for (size_t i = s_.find('{', pos); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void Push(TokenKind kind, std::string text) {
    if (kind == TokenKind::kData && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), line_});
  }

  // After a tag's closing delimiter at `pos` with whitespace control `sign`: where the next
  // text starts.
  size_t AfterClose(size_t pos, char sign, bool block_or_comment) {
    if (sign == '-') return SkipSpace(s_, pos, &line_);
    if (sign == 0 && block_or_comment && pos < s_.size() && s_[pos] == '\n') {
      ++line_;
      return pos + 1;  // trim_blocks
    }
    return pos;
  }

  absl::StatusOr<size_t> SkipComment(size_t pos) {
    const int start_line = line_;
    for (size_t i = pos; i + 1 < s_.size(); ++i) {
      char sign = 0;
      if ((s_[i] == '-' || s_[i] == '+') && s_.compare(i + 1, 2, "#}") == 0) {
        sign = s_[i];
      } else if (s_.compare(i, 2, "#}") != 0) {
        continue;
      }
      line_ += static_cast<int>(std::count(s_.begin() + pos, s_.begin() + i, '\n'));
      return AfterClose(i + (sign ? 3 : 2), sign, true);
    }
    return LexError(start_line, "comment {# is never closed");
  }

  absl::StatusOr<size_t> LexTag(size_t pos, bool block) {
    const int start_line = line_;
    Push(block ? TokenKind::kBlockBegin : TokenKind::kPrintBegin, block ? "{%" : "{{");
    if (block) {
      size_t p = SkipSpace(s_, pos, &line_);
      line_ = start_line;
      if (s_.compare(p, 3, "raw") == 0 && (p + 3 >= s_.size() || !std::isalnum(static_cast<unsigned char>(s_[p + 3])))) {
        return LexError(start_line, "unsupported statement 'raw'");
      }
    }
    std::vector<char> brackets;
    const std::string_view close = block ? "%}" : "}}";
    while (true) {
      pos = SkipSpace(s_, pos, &line_);
      if (pos >= s_.size()) {
        return LexError(start_line, absl::StrCat(block ? "{%" : "{{", " is never closed"));
      }
      if (brackets.empty()) {
        char sign = 0;
        if ((s_[pos] == '-' || (block && s_[pos] == '+')) && s_.compare(pos + 1, 2, close) == 0) {
          sign = s_[pos];
        }
        if (sign != 0 || s_.compare(pos, 2, close) == 0) {
          Push(block ? TokenKind::kBlockEnd : TokenKind::kPrintEnd, std::string(close));
          return AfterClose(pos + (sign ? 3 : 2), sign, block);
        }
      }
      absl::StatusOr<size_t> next = LexOne(pos, &brackets);
      if (!next.ok()) return next.status();
      pos = *next;
    }
  }

  absl::StatusOr<size_t> LexOne(size_t pos, std::vector<char>* brackets) {
    const char c = s_[pos];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos;
      while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
      bool is_float = false;
      const bool after_dot = pos > 0 && s_[pos - 1] == '.';
      if (!after_dot && end + 1 < s_.size() && s_[end] == '.' &&
          std::isdigit(static_cast<unsigned char>(s_[end + 1]))) {
        is_float = true;
        ++end;
        while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
      }
      if (!after_dot && end < s_.size() && (s_[end] == 'e' || s_[end] == 'E')) {
        size_t e = end + 1;
        if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
        if (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) {
          is_float = true;
          end = e;
          while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
        }
      }
      if (end < s_.size() && (s_[end] == '_' || std::isalpha(static_cast<unsigned char>(s_[end])))) {
        return LexError(line_, absl::StrCat("unsupported number literal near '",
                                            s_.substr(pos, end - pos + 1), "'"));
      }
      Push(is_float ? TokenKind::kFloat : TokenKind::kInteger, s_.substr(pos, end - pos));
      return end;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos;
      while (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) ++end;
      if (end < s_.size() && static_cast<unsigned char>(s_[end]) >= 0x80) {
        return LexError(line_, "unsupported non-ASCII identifier");
      }
      Push(TokenKind::kName, s_.substr(pos, end - pos));
      return end;
    }
    if (c == '\'' || c == '"') {
      size_t end = pos + 1;
      while (end < s_.size() && s_[end] != c) end += s_[end] == '\\' ? 2 : 1;
      if (end >= s_.size()) return LexError(line_, "string literal is never closed");
      const int start_line = line_;
      absl::StatusOr<std::string> decoded = DecodeEscapes(std::string_view(s_).substr(pos + 1, end - pos - 1), line_);
      if (!decoded.ok()) return decoded.status();
      Push(TokenKind::kString, *std::move(decoded));
      tokens_.back().line = start_line;
      line_ += static_cast<int>(std::count(s_.begin() + pos, s_.begin() + end, '\n'));
      return end + 1;
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (s_.compare(pos, 2, op) == 0) {
        Push(TokenKind::kOperator, std::string(op));
        return pos + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}=.:|,;<>").find(c) == std::string_view::npos) {
      return LexError(line_, absl::StrCat("unexpected character '", std::string(1, c), "' in a tag"));
    }
    if (c == '(' || c == '[' || c == '{') brackets->push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets->empty() || brackets->back() != open) {
        return LexError(line_, absl::StrCat("unbalanced '", std::string(1, c), "'"));
      }
      brackets->pop_back();
    }
    Push(TokenKind::kOperator, std::string(1, c));
    return pos + 1;
  }

  std::string s_;
  int line_ = 1;
  std::vector<Token> tokens_;
};

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace mlaserve::router::chat_template
