#include "router/openai/request_template_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mlaserve::router::openai {

RequestTemplateCache::RequestTemplateCache(size_t max_entries)
    : max_entries_(std::max<size_t>(max_entries, 1)) {}

absl::StatusOr<std::shared_ptr<const RequestTemplate>> RequestTemplateCache::Get(
    std::string_view source) {
  if (source.size() > kMaxRequestTemplateBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the request's chat template has ",
                                                   source.size(), " bytes; at most ",
                                                   kMaxRequestTemplateBytes, " are accepted"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (auto it = index_.find(source); it != index_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);
      return it->second->compiled;
    }
  }
  // Compiled outside the lock: other requests' lookups do not wait on a parse. Two requests
  // bringing the same new template at once may both compile it; the first inserted is kept.
  Compiled compiled = [&]() -> Compiled {
    absl::StatusOr<chat_template::ChatTemplate> t = chat_template::ChatTemplate::Parse(source);
    if (!t.ok()) return t.status();
    const bool reads_tools = t->ReadsVariable("tools");
    return std::make_shared<const RequestTemplate>(RequestTemplate{*std::move(t), reads_tools});
  }();
  absl::MutexLock lock(&mu_);
  ++compiles_;
  if (auto it = index_.find(source); it != index_.end()) return it->second->compiled;
  entries_.push_front(Entry{std::string(source), compiled});
  index_.emplace(entries_.front().source, entries_.begin());
  if (entries_.size() > max_entries_) {
    index_.erase(entries_.back().source);
    entries_.pop_back();
  }
  return compiled;
}

int64_t RequestTemplateCache::compiles() const {
  absl::MutexLock lock(&mu_);
  return compiles_;
}

}  // namespace mlaserve::router::openai
