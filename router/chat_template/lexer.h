// Lexer for the chat-template Jinja subset, with the whitespace rules transformers renders
// chat templates under (Jinja2 with trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False):
//  - newlines (\r\n, \r) become \n and one trailing newline of the source is dropped;
//  - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}` / `-#}` all
//    whitespace after it;
//  - lstrip_blocks: spaces and tabs between a line's start and a `{%` or `{#` are dropped
//    (not before `{{`, not with `{%+`);
//  - trim_blocks: the first newline after `%}` or `#}` is dropped (not with `+%}`).
// Comments vanish here; `{% raw %}` is refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaserve::router::chat_template {

enum class TokenKind {
  kData,         // template text, printed as is
  kPrintBegin,   // {{
  kPrintEnd,     // }}
  kBlockBegin,   // {%
  kBlockEnd,     // %}
  kName,         // identifier or keyword
  kString,       // string literal, escapes already decoded
  kInteger,
  kFloat,
  kOperator,     // + - * / // % ** ~ [ ] ( ) { } == != > >= < <= = . : | , ;
  kEnd,          // end of the template
};

struct Token {
  TokenKind kind;
  std::string text;  // data, name, decoded string, number or operator
  int line = 1;
};

// INVALID_ARGUMENT naming the line for malformed templates (an unterminated tag or string,
// an unknown character) and for what this subset does not lex (raw blocks, non-ASCII names,
// \N{...} escapes).
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace mlaserve::router::chat_template
