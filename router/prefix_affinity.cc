#include "router/prefix_affinity.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/types/span.h"
#include "kernels/common/page.h"

namespace mlaserve::router {

namespace {

uint64_t WorkerKey(std::string_view worker_id) { return absl::HashOf(worker_id); }

// The table's key of one page of one worker.
uint64_t EntryKey(uint64_t worker, uint64_t page) { return absl::HashOf(worker, page); }

}  // namespace

PrefixAffinity::PromptPages::PromptPages(std::span<const int32_t> tokens,
                                         std::string_view cache_salt)
    : prompt_tokens_(static_cast<int64_t>(tokens.size())) {
  const size_t pages = tokens.size() / kernels::kPageSize;
  reusable_pages_ = tokens.empty() ? 0 : (tokens.size() - 1) / kernels::kPageSize;
  keys_.reserve(pages);
  // Page 0 chains from the salt, so every later key depends on it too.
  uint64_t previous = absl::HashOf(cache_salt);
  for (size_t i = 0; i < pages; ++i) {
    const absl::Span<const int32_t> page(tokens.data() + i * kernels::kPageSize,
                                         kernels::kPageSize);
    previous = absl::HashOf(previous, page);
    keys_.push_back(previous);
  }
}

PrefixAffinity::PrefixAffinity(Options options)
    : max_entries_(std::clamp<int64_t>(options.max_entries, 1, kMaxEntries)) {}

int64_t PrefixAffinity::entries() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(index_.size());
}

size_t PrefixAffinity::LeadingPagesLocked(uint64_t worker, const PromptPages& prompt) const {
  size_t n = 0;
  while (n < prompt.reusable_pages() && index_.contains(EntryKey(worker, prompt.keys()[n]))) ++n;
  return n;
}

int64_t PrefixAffinity::MatchedTokens(std::string_view worker_id,
                                      const PromptPages& prompt) const {
  const uint64_t worker = WorkerKey(worker_id);
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(LeadingPagesLocked(worker, prompt)) * kernels::kPageSize;
}

int64_t PrefixAffinity::Record(std::string_view worker_id, const PromptPages& prompt) {
  const uint64_t worker = WorkerKey(worker_id);
  absl::MutexLock lock(&mu_);
  const size_t matched = LeadingPagesLocked(worker, prompt);
  // Last page first, so the first page ends up the most recent and a full table evicts a
  // prefix's deeper pages before the pages they hang from.
  for (size_t i = prompt.keys().size(); i-- > 0;) TouchLocked(EntryKey(worker, prompt.keys()[i]));
  return static_cast<int64_t>(matched) * kernels::kPageSize;
}

void PrefixAffinity::TouchLocked(uint64_t key) {
  if (auto it = index_.find(key); it != index_.end()) {
    UnlinkLocked(it->second);
    LinkNewestLocked(it->second);
    return;
  }
  uint32_t slot;
  if (static_cast<int64_t>(slots_.size()) < max_entries_) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = oldest_;
    UnlinkLocked(slot);
    index_.erase(slots_[slot].key);
  }
  slots_[slot].key = key;
  index_.emplace(key, slot);
  LinkNewestLocked(slot);
}

void PrefixAffinity::UnlinkLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.newer != kNone) slots_[s.newer].older = s.older; else newest_ = s.older;
  if (s.older != kNone) slots_[s.older].newer = s.newer; else oldest_ = s.newer;
  s.newer = s.older = kNone;
}

void PrefixAffinity::LinkNewestLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  s.newer = kNone;
  s.older = newest_;
  if (newest_ != kNone) slots_[newest_].newer = slot;
  newest_ = slot;
  if (oldest_ == kNone) oldest_ = slot;
}

}  // namespace mlaserve::router
