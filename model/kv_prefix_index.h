// KvPrefixIndex: which pages of a KV pool hold the KV of which prompt prefixes (the prefill
// worker's prefix cache; docs/serving.md "Prefix cache"). KvPool owns one when its prefix cache
// is on and keeps it under the pool's lock; this class is plain data, not thread-safe.
//
// A cached page holds the KV of one whole page of prompt tokens, positions [64 i, 64 i + 64)
// (kernels::kPageSize), computed after a particular prefix. The KV of a position depends on
// every token before it, so a page's key is the page caching the previous 64 tokens (its
// parent; none for i = 0), that parent's generation, and the page's own 64 token ids, compared
// exactly (the hash only finds candidates). A prefix is found page by page from the start.
//
// Salts (api.proto GenerateRequest.cache_salt): page 0 has no parent, so its key is the salt
// of the prompt that published it and its tokens. The salt is stored in the page's node and
// compared exactly like the tokens, so prompts with different salts never share a page, not
// even through a hash collision; later pages chain from page 0 and need nothing more. The
// empty salt is the shared default.
//
// Generations: a page gets a new generation each time it is registered. When a page is
// evicted its children stay registered under (page, old generation), which no chain can reach
// any more: once the page is registered again it has a new generation, and until then it is
// not registered at all. Such unreachable entries leave when their own pages are evicted.
//
// Publishing a growing prompt (chunked prefill): Insert walks the prompt's pages from page 0,
// hashing each. A caller that publishes the same prompt again after each chunk keeps a
// KvPrefixCursor per prompt, and Insert then resumes after the pages it walked last time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mlaserve::model {

// Where Insert got to in one prompt: the cached page its walk settled on for each of the
// prompt's first pages (the caller's own, or one already caching that prefix), with that page's
// generation then. Insert resumes after the longest leading part of it whose pages still hold
// the same registration (each is checked, no hashing), so it registers exactly what a walk
// from page 0 would: where a page of the chain was evicted since, the walk resumes before it,
// and nothing is chained under a stale parent. Belongs to one prompt's tokens and salt in one
// index: Reset it (or use a fresh one) when its first pages' tokens or its salt change.
class KvPrefixCursor {
 public:
  // Pages of the prompt walked so far (Insert's work left is from there on, when they hold).
  int pages() const { return static_cast<int>(chain_.size()); }
  void Reset() { chain_.clear(); }

 private:
  friend class KvPrefixIndex;
  struct Link {
    int32_t page;
    uint32_t generation;
  };
  std::vector<Link> chain_;
};

class KvPrefixIndex {
 public:
  explicit KvPrefixIndex(int num_pages);

  // The pages caching the longest run of `tokens`' leading whole pages published under
  // `salt`, at most `max_pages` of them, in order (page i of the result holds tokens
  // [64 i, 64 i + 64)).
  std::vector<int32_t> Match(std::span<const int32_t> tokens, int max_pages,
                             std::string_view salt = {}) const;

  // Registers pages[i] as the cache of `tokens`' page i for i < full_pages (each of those
  // pages holds all 64 of its tokens' KV). Where a page already caches the same prefix (a
  // prompt that took it from the cache, or one computed twice at the same time), that page
  // stays the cache and pages[i] is left out; the chain continues from the cached one. A
  // page id already caching another prefix is left out too, and the chain stops there.
  // Registered under `salt`: only Match with the same salt finds them.
  //
  // With `cursor` (kept by the caller for this prompt): resumes where the last Insert with it
  // stopped, while the pages it walked still hold what they held (KvPrefixCursor), and leaves
  // it where this one stopped. The index ends up the same as without it.
  void Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages, int full_pages,
              std::string_view salt = {}, KvPrefixCursor* cursor = nullptr);

  bool cached(int32_t page) const { return nodes_[page].cached; }
  // The page no longer holds its prefix (evicted, or the cache is cleared).
  void Erase(int32_t page);
  // Pages registered now.
  int size() const { return size_; }

 private:
  struct Node {
    bool cached = false;
    int32_t parent = -1;
    uint32_t parent_generation = 0;
    uint32_t generation = 0;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // the page's kPageSize ids
    std::string salt;             // page 0's salt (empty for later pages)
  };
  // `salt` is page 0's (empty for every later page: its parent carries it).
  static uint64_t Key(int32_t parent, uint32_t parent_generation, std::string_view salt,
                      std::span<const int32_t> tokens);
  // The page registered for (parent, generation, salt, tokens), or -1.
  int32_t Find(uint64_t hash, int32_t parent, uint32_t parent_generation, std::string_view salt,
               std::span<const int32_t> tokens) const;

  std::vector<Node> nodes_;  // by page id
  std::unordered_multimap<uint64_t, int32_t> by_key_;
  int size_ = 0;
};

}  // namespace mlaserve::model
