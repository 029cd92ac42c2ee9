// Jinja's wordwrap filter: each line of the text wrapped by Python's textwrap.wrap (expand_tabs
// and replace_whitespace off, drop_whitespace on), the pieces joined by `wrapstring` ("\n").
// textwrap's word splitting (its wordsep_re, with the hyphen and em-dash rules, or
// wordsep_simple_re without break_on_hyphens) is reproduced on code points.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "router/chat_template/call_args.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template {

// `s|wordwrap(width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True)`.
absl::StatusOr<Value> WordWrap(const Value& s, const std::vector<Value>& args, const KwArgs& kwargs);

}  // namespace mlaserve::router::chat_template
