// The filters over web text: striptags (markupsafe's Markup.striptags, with Python's
// html.unescape) and urlencode (Jinja's do_urlencode over urllib's quoting).
#pragma once

#include "absl/status/statusor.h"
#include "router/chat_template/value.h"

namespace mlaserve::router::chat_template::html_filters {

// Comments, then tags, removed; whitespace runs collapsed to one space; character references
// unescaped as html.unescape does. Of the named references only those whose result is
// certain without HTML5's 2,231-name table are rendered (&amp; &lt; &gt; &quot; &apos;
// &nbsp; and their legacy forms, and text that cannot start a name); another is refused,
// naming it.
absl::StatusOr<Value> StripTags(const Value& value);

// A string (or any non-iterable, through str()) percent-quoted with '/' kept; a dict or an
// iterable of pairs as a query string (`k=v&...`, spaces as '+').
absl::StatusOr<Value> UrlEncode(const Value& value);

}  // namespace mlaserve::router::chat_template::html_filters
