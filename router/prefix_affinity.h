// PrefixAffinity: the router's guess of which prompt prefixes each prefill worker holds in its
// prefix cache, so that a prompt sharing a long prefix with earlier ones goes where that
// prefix's KV already is. The routing policy (router/routing_policy.h) counts only a prompt's
// uncached tokens as its cost on a worker, so affinity wins unless that worker's queue is
// longer by more than the saving.
//
// What it mirrors: a prefill worker keeps the KV of the whole kernels::kPageSize-token pages of
// the prompts it prefilled and reuses the leading pages a later prompt shares, at most
// prompt_len - 1 tokens (the last prompt token is always computed: its logits give the first
// new token). Here a prompt's whole pages form a chain, page i keyed by a 64-bit hash of (the
// key of page i - 1, its token ids), so equal keys mean equal prefixes up to hash collisions.
// An entry is (worker, page key), recorded when the router sends the prompt to that worker.
// The request's cache_salt (api.proto; the workers share cached pages only within a salt) is
// mixed into page 0's key, so prompts of different salts never look cached for each other.
//
// A hint, never trusted for correctness: the worker decides what it reuses and computes the
// rest. The guess is wrong when the worker evicted the pages, restarted under the same id or
// failed the prefill; that costs speed only (the prompt is routed as if cached and computed in
// full there).
//
// Bounded: at most Options::max_entries entries over all workers together, the least recently
// recorded evicted first (a prompt's first pages count as more recent than its later ones,
// since a later page is useless without them). About 50 bytes an entry: 1 << 20 entries, the
// default, are about 50 MiB and cover 64 Mi prompt tokens of prefixes. Workers the registry has
// forgotten are not told apart: nothing records for them any more, so their entries age out.
//
// Thread-safe: one mutex guards the table; Record holds it for two passes over the prompt's
// pages, MatchedTokens (shared) for one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace mlaserve::router {

class PrefixAffinity {
 public:
  struct Options {
    // Entries (one per worker and page) kept at most (--prefix-affinity-entries).
    int64_t max_entries = int64_t{1} << 20;
  };
  // The largest max_entries accepted (slots are 32-bit indices); larger values are clamped.
  static constexpr int64_t kMaxEntries = int64_t{1} << 30;

  // One prompt's page chain, computed once and then matched against every candidate worker.
  class PromptPages {
   public:
    // `cache_salt`: the request's (empty: the shared default), mixed into page 0's key.
    explicit PromptPages(std::span<const int32_t> tokens, std::string_view cache_salt = {});

    int64_t prompt_tokens() const { return prompt_tokens_; }
    // The chain keys of the prompt's whole pages, first page first.
    const std::vector<uint64_t>& keys() const { return keys_; }
    // Leading pages a worker may reuse: the whole pages within the first prompt_tokens - 1.
    size_t reusable_pages() const { return reusable_pages_; }

   private:
    int64_t prompt_tokens_ = 0;
    std::vector<uint64_t> keys_;
    size_t reusable_pages_ = 0;
  };

  explicit PrefixAffinity(Options options);

  // Prompt tokens `worker_id` is expected to reuse from its cache: kPageSize x the leading
  // reusable pages of the prompt recorded for it. Touches nothing (a candidate is not a choice).
  int64_t MatchedTokens(std::string_view worker_id, const PromptPages& prompt) const;
  // The prompt was sent to `worker_id`: records (or refreshes) every whole page of it for that
  // worker. Returns MatchedTokens as it was just before, what the worker is expected to reuse.
  int64_t Record(std::string_view worker_id, const PromptPages& prompt);

  // The same for a prompt's token ids (default salt), for callers that match or record it
  // once.
  int64_t MatchedTokens(std::string_view worker_id, std::span<const int32_t> tokens) const {
    return MatchedTokens(worker_id, PromptPages(tokens));
  }
  int64_t Record(std::string_view worker_id, std::span<const int32_t> tokens) {
    return Record(worker_id, PromptPages(tokens));
  }

  int64_t entries() const;
  int64_t max_entries() const { return max_entries_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // An entry in the recency list; slots are reused, never freed, so at most max_entries exist.
  struct Slot {
    uint64_t key = 0;
    uint32_t newer = kNone;
    uint32_t older = kNone;
  };

  // Leading pages of `prompt` present for the worker whose id hashes to `worker`.
  size_t LeadingPagesLocked(uint64_t worker, const PromptPages& prompt) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes `key` the most recent entry, adding it (evicting the oldest when full) if absent.
  void TouchLocked(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnlinkLocked(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LinkNewestLocked(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_entries_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> index_ ABSL_GUARDED_BY(mu_);  // entry key -> slot
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint32_t newest_ ABSL_GUARDED_BY(mu_) = kNone;
  uint32_t oldest_ ABSL_GUARDED_BY(mu_) = kNone;
};

}  // namespace mlaserve::router
