// RequestTemplateCache: the chat templates requests bring themselves (vLLM's request-level
// `chat_template`, served with --trust-request-chat-template), compiled by the router's own
// interpreter (router/chat_template/) and kept, so a client that sends the same template with
// every request has it compiled once.
//
// A template longer than kMaxRequestTemplateBytes is refused before it is compiled (the body
// bound alone would let each request make the router parse 4 MiB of template). Compiling and
// rendering are the checkpoint template's, under its limits (kMaxMacroDepth, range()'s bound):
// a request's template gets no more than the server's own.
//
// The cache is an LRU of at most `max_entries` templates keyed by their exact text; a compile
// error is cached as well (a client repeating a broken template is not re-parsed each time).
// Memory: at most max_entries x (64 KiB of text + its syntax tree).
//
// Thread-safety: Get may be called from any thread; the templates it hands out are immutable
// and stay valid while held, evicted or not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "router/chat_template/chat_template.h"

namespace mlaserve::router::openai {

// The longest request template compiled (bytes of its text).
inline constexpr size_t kMaxRequestTemplateBytes = 64 * 1024;

// A request's template, compiled.
struct RequestTemplate {
  chat_template::ChatTemplate tmpl;
  bool reads_tools = false;  // tmpl.ReadsVariable("tools"), read once
};

class RequestTemplateCache {
 public:
  explicit RequestTemplateCache(size_t max_entries = 32);

  // The compiled template of `source`. INVALID_ARGUMENT saying the size for a text over
  // kMaxRequestTemplateBytes, or the interpreter's message (with its line) for one it cannot
  // compile.
  absl::StatusOr<std::shared_ptr<const RequestTemplate>> Get(std::string_view source);

  // Templates compiled so far (each miss compiles once), for tests.
  int64_t compiles() const;

 private:
  using Compiled = absl::StatusOr<std::shared_ptr<const RequestTemplate>>;
  struct Entry {
    std::string source;
    Compiled compiled;
  };

  const size_t max_entries_;
  mutable absl::Mutex mu_;
  // Most recently used first; index_ keys point into the entries' `source`.
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string_view, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t compiles_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlaserve::router::openai
