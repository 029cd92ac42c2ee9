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
// Generations: a page gets a new generation each time it is registered. When a page is
// evicted its children stay registered under (page, old generation), which no chain can reach
// any more: once the page is registered again it has a new generation, and until then it is
// not registered at all. Such unreachable entries leave when their own pages are evicted.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace mlaserve::model {

class KvPrefixIndex {
 public:
  explicit KvPrefixIndex(int num_pages);

  // The pages caching the longest run of `tokens`' leading whole pages, at most `max_pages`
  // of them, in order (page i of the result holds tokens [64 i, 64 i + 64)).
  std::vector<int32_t> Match(std::span<const int32_t> tokens, int max_pages) const;

  // Registers pages[i] as the cache of `tokens`' page i for i < full_pages (each of those
  // pages holds all 64 of its tokens' KV). Where a page already caches the same prefix (a
  // prompt that took it from the cache, or one computed twice at the same time), that page
  // stays the cache and pages[i] is left out; the chain continues from the cached one. A
  // page id already caching another prefix is left out too, and the chain stops there.
  // Returns the pages newly registered.
  std::vector<int32_t> Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                              int full_pages);

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
  };
  static uint64_t Key(int32_t parent, uint32_t parent_generation,
                      std::span<const int32_t> tokens);
  // The page registered for (parent, generation, tokens), or -1.
  int32_t Find(uint64_t hash, int32_t parent, uint32_t parent_generation,
               std::span<const int32_t> tokens) const;

  std::vector<Node> nodes_;  // by page id
  std::unordered_multimap<uint64_t, int32_t> by_key_;
  int size_ = 0;
};

}  // namespace mlaserve::model
